"""Checking a database URL a user gave before anything opens, creates or parses a file with it.

A plain SQLite URL (what fleet writes itself) is checked without SQLAlchemy; any other URL is
parsed with SQLAlchemy's parser, which opening it needs anyway.
"""

from __future__ import annotations

from db.errors import InvalidDatabaseUrl
from db.sqlite import plain_sqlite_path

# The URL options fleet passes to the SQLite driver. The rest would change how fleet's own
# connections behave (isolation_level, detect_types, check_same_thread), be ignored with a
# warning, or (uri=true) turn the path into a `file:` URI that may name another file.
SQLITE_URL_OPTIONS = ("cached_statements", "timeout")


def check_path_text(path: str, shown: str) -> None:
    """InvalidDatabaseUrl when a file path cannot name a file (a NUL byte)."""
    if "\x00" in path:
        raise InvalidDatabaseUrl(f"database URL {shown!r}: a file path cannot contain a NUL "
                                 "byte (%00)")


def check_database_url(url: str) -> None:
    """Raise InvalidDatabaseUrl when `url` (resolved: db.engine.resolve_database_url) cannot be
    parsed, names an impossible SQLite path, or gives SQLite an option fleet does not support."""
    plain = plain_sqlite_path(url)
    if plain is not None:
        check_path_text(plain, url)
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
        backend = parsed.get_backend_name()
    except (ArgumentError, ValueError, TypeError) as exc:  # e.g. a port that is no number
        raise InvalidDatabaseUrl(f"invalid database URL {_shown(url)!r}: {exc}") from exc
    if backend != "sqlite":
        return
    shown = parsed.render_as_string(hide_password=True)
    check_path_text(parsed.database or "", shown)
    unsupported = sorted(set(parsed.query) - set(SQLITE_URL_OPTIONS))
    if unsupported:
        names = ", ".join(repr(name) for name in unsupported)
        verb = "option {} is" if len(unsupported) == 1 else "options {} are"
        raise InvalidDatabaseUrl(
            f"database URL {shown}: {verb.format(names)} not supported for SQLite (fleet takes "
            f"{' and '.join(SQLITE_URL_OPTIONS)}); name the file as sqlite:///PATH or a plain "
            "path: a file this user cannot write is opened read-only without any option"
        )


def _shown(url: str) -> str:
    """An unparsable URL for a message: only what follows any credentials."""
    return url.rsplit("@", 1)[-1]
