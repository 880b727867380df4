"""The one edge where database errors become `StorageError` naming what fleet was doing.

Every service reaches the database through `FleetContext.read`/`write`/`query` (or
`storage_errors` directly in a synchronous helper), so a SQLAlchemy or `db.errors.DatabaseError`
never escapes to a caller: the CLI, the TUI and scripts catch `FleetError` only.
`AllocationConflict` from the claim is translated into fleet's own AllocationConflict (exit 6),
which placement retries.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from fleet.errors import AllocationConflict, StorageError


def redact_url(url: str) -> str:
    """The URL without a password, for messages."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # unparsable: show only what follows any credentials
        return url.split("@")[-1]


@contextmanager
def storage_errors(action: str | None, url: str | None = None) -> Iterator[None]:
    """Run the block; a database failure becomes StorageError("cannot ACTION in URL: …").

    With `action` None the storage layer's own message is kept whole (opening the database:
    it already names the URL and, for a missing driver, the package to install).
    """
    from db.errors import AllocationConflict as DbAllocationConflict
    from db.errors import DatabaseError

    try:
        yield
    except DbAllocationConflict as exc:
        raise AllocationConflict(str(exc)) from exc
    except DatabaseError as exc:  # its message already names the database
        if action is None:
            raise StorageError(str(exc)) from exc
        raise StorageError(f"cannot {action}: {_first_line(exc)}") from exc
    except Exception as exc:
        if not _is_sqlalchemy_error(exc):
            raise
        where = f" in {redact_url(url)}" if url else ""
        raise StorageError(f"cannot {action or 'use the database'}{where}: "
                           f"{_first_line(exc)}") from exc


def _is_sqlalchemy_error(exc: Exception) -> bool:
    """Whether `exc` is one of SQLAlchemy's errors; a process that never imported SQLAlchemy
    (reads of an SQLite file go through the stdlib driver) cannot have raised one."""
    errors = sys.modules.get("sqlalchemy.exc")
    return errors is not None and isinstance(exc, errors.SQLAlchemyError)


def _first_line(exc: BaseException) -> str:
    """SQLAlchemy appends SQL and a background link on later lines; keep the reason."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
