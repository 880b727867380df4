"""`fleet db`: back up the database while it is in use, check it, apply retention, copy it."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fleet.cli.context import echo_json, global_options, json_option
from fleet.cli.runner import run_async
from fleet.render.exit_codes import EXIT_FAILED

if TYPE_CHECKING:
    from fleet.monitor.config import Settings


@click.group("db")
def db_group() -> None:
    """Maintain the fleet database (SQLite file or PostgreSQL)."""


def _regular_destination(_ctx: click.Context, _param: click.Parameter, value: Path) -> Path:
    """FILE as given, when it does not exist or is a regular file (a symbolic link is
    followed): a backup replaces FILE, which must never turn a device or a FIFO into a file."""
    try:
        mode = os.stat(value.expanduser()).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return value
    except OSError as exc:
        raise click.BadParameter(f"{value}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(mode):
        raise click.BadParameter(f"{value} exists and is not a regular file; a backup only "
                                 "creates or (with --force) replaces a regular file")
    return value


def _check_destination(destination: Path, *, force: bool) -> None:
    """Refuse, as bad input (exit 2), a FILE that exists without --force or whose directory
    does not exist; the backup checks again as it writes (it may have changed since)."""
    from fleet.errors import ConfigError

    path = destination.expanduser()
    if path.exists() and not force:
        raise ConfigError(f"{destination} already exists: pass --force to replace it, or name "
                          "another FILE")
    if not path.parent.is_dir():
        raise ConfigError(f"cannot back up to {destination}: directory {path.parent} does not "
                          "exist (create it first)")


_DAYS = click.FloatRange(min=0, max=36_500, min_open=True)  # up to a century


def _finite(_ctx: click.Context, param: click.Parameter, value: float) -> float:
    """`value` unless it is NaN, which passes every range comparison."""
    if value != value:
        raise click.BadParameter(f"{param.opts[0]} must be a number of days, not nan")
    return value


def _database_url(_ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A FROM_URL or TO_URL that is not empty (an empty one would mean the default database)."""
    if not value.strip():
        raise click.BadParameter(f"empty database URL for {param.human_readable_name}")
    return value


@db_group.command("backup")
@click.argument("destination", metavar="FILE", callback=_regular_destination,
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@json_option
@click.pass_context
def db_backup(ctx: click.Context, destination: Path, force: bool) -> int:
    """Copy the database to FILE, consistently, even while `fleet monitor` writes to it.

    SQLite: the online backup API, checked with quick_check. PostgreSQL: pg_dump's custom
    format (restore with pg_restore), listed with pg_restore --list; exits 2 when pg_dump is
    not installed. FILE is created with mode 0600 and renamed into place only when complete.
    Refuses (exit 2) to overwrite FILE without --force, a FILE whose directory does not
    exist, and a FILE that is not a regular file (a device, a FIFO) even with --force.

    \b
    Examples:
      fleet db backup ~/fleet-$(date +%F).db
      fleet --db /srv/fleet/fleet.db db backup /backup/fleet.db --force
    """
    from fleet.services.database import backup

    options = global_options(ctx)
    _check_destination(destination, force=force)
    result = backup(options.db_url, destination, force=force)
    if options.as_json:
        echo_json({"source": result.source, "destination": str(result.destination),
                   "method": result.method, "size_bytes": result.size_bytes,
                   "pages": result.pages, "seconds": round(result.seconds, 3),
                   "verified": result.verified})
    else:
        click.echo(f"backed up {result.source} to {result.destination} ({result.method}, "
                   f"{result.size_bytes / 1e6:.1f} MB in {result.seconds:.2f}s, "
                   f"{result.verified})")
    return 0


@db_group.command("check")
@json_option
@click.pass_context
def db_check(ctx: click.Context) -> int:
    """Verify the database and its schema version, changing nothing.

    SQLite (opened read-only): integrity_check and foreign_key_check. PostgreSQL: every
    declared constraint and index present, constraints validated, indexes valid
    (pg_index.indisvalid), no row referencing a missing one. Exits 0 when healthy, 1 with the
    problems listed otherwise, 2 for another kind of database, 4 when it cannot be reached
    or opened (a missing file, or one that is not an SQLite database).

    \b
    Examples:
      fleet db check
      fleet --db /backup/fleet.db db check
      fleet db check --json | jq .problems
    """
    from fleet.services.database import check

    options = global_options(ctx)
    result = check(options.db_url)
    if options.as_json:
        echo_json({"database": result.target, "ok": result.ok, "revision": result.revision,
                   "head": result.head, "checks": list(result.checks),
                   "problems": list(result.problems)})
    elif result.ok:
        click.echo(f"{result.target}: ok ({', '.join(result.checks)}, schema {result.revision})")
    else:
        click.echo(f"{result.target}: {len(result.problems)} problem(s)")
        for problem in result.problems:
            click.echo(f"  {problem}")
    return 0 if result.ok else EXIT_FAILED


@db_group.command("copy")
@click.argument("source", metavar="FROM_URL", callback=_database_url)
@click.argument("target", metavar="TO_URL", callback=_database_url)
@click.option("--force", is_flag=True, help="Replace the data TO_URL already holds.")
@click.option("--batch-rows", type=click.IntRange(min=1), default=5000, show_default=True,
              help="Rows read and written per batch.")
@json_option
@click.pass_context
def db_copy(ctx: click.Context, source: str, target: str, force: bool, batch_rows: int) -> int:
    """Copy the whole fleet history from FROM_URL to TO_URL (e.g. SQLite to PostgreSQL).

    FROM_URL and TO_URL are SQLAlchemy URLs or SQLite file paths. The source is read in one
    snapshot (a monitor may keep writing to it) and the target written in one transaction:
    an error or Ctrl-C leaves it unchanged. Row counts are verified per table before the
    commit. TO_URL is created and migrated if needed; one that holds data is refused unless
    --force. A progress bar goes to stderr.

    \b
    Examples:
      fleet db copy ~/.local/share/fleet/fleet.db postgresql+psycopg://fleet@db/fleet
      fleet db copy postgresql+psycopg://fleet@db/fleet /backup/fleet.db --force
    """
    from fleet.services.database import copy

    options = global_options(ctx)
    started: set[str] = set()

    def progress(table: str, done: int, total: int) -> None:
        """One bar per table on stderr, redrawn in place after every batch."""
        if table not in started:
            started.add(table)
            click.echo(f"{table}: {total:,} rows", err=True)
        width = 30
        filled = width if total == 0 else width * done // total
        click.echo(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,}",
                   err=True, nl=done >= total)

    result = copy(source, target, force=force, batch_rows=batch_rows, progress=progress)
    if options.as_json:
        echo_json({"source": result.source, "target": result.target, "rows": result.rows,
                   "total_rows": result.total_rows, "verified": True})
    else:
        click.echo(f"copied {result.total_rows:,} rows in {len(result.rows)} tables from "
                   f"{result.source} to {result.target} (row counts verified per table)")
    return 0


FOREVER = "forever"


def _rollup_days(ctx: click.Context, param: click.Parameter, value: str | None
                 ) -> float | str | None:
    """A number of days as --raw-days takes it, or FOREVER (what `rollup_days: null` says)."""
    if value is None or value.strip().lower() == FOREVER:
        return None if value is None else FOREVER
    try:
        days = float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a number of days nor "
                                 f"'{FOREVER}'") from None
    return float(_DAYS.convert(_finite(ctx, param, days), param, ctx))


def _finite_or_none(ctx: click.Context, param: click.Parameter, value: float | None
                    ) -> float | None:
    return None if value is None else _finite(ctx, param, value)


@db_group.command("retention")
@click.option("--raw-days", type=_DAYS, default=None, callback=_finite_or_none, metavar="DAYS",
              help="Keep raw host and GPU samples this many days "
                   "[settings: retention.raw_days, 7].")
@click.option("--rollup-days", default=None, callback=_rollup_days, metavar="DAYS|forever",
              help="Keep 1- and 5-minute GPU rollups this many days, or forever "
                   "[settings: retention.rollup_days, 365; null is forever].")
@json_option
@click.pass_context
def db_retention(ctx: click.Context, raw_days: float | None,
                 rollup_days: float | str | None) -> int:
    """Roll raw GPU samples up into 1-minute and 5-minute buckets and prune old rows, now.

    `fleet monitor` does this itself every few minutes; this is for a database whose monitor
    is not running. Without options it keeps exactly what the monitor keeps: the effective
    `retention:` settings (`fleet config show`: defaults, the settings file, the inventory's
    `settings:`); --raw-days and --rollup-days override one value each. What is kept, and
    where each value comes from, is printed before the counts of what was rolled up and
    deleted. Safe to repeat: minutes already rolled up are not counted twice, and raw samples
    are never deleted before they are rolled up.

    \b
    Examples:
      fleet db retention
      fleet db retention --raw-days 2 --rollup-days 730
      fleet db retention --rollup-days forever
    """
    from fleet.errors import ConfigError
    from fleet.health.retention import DAY_S, RetentionResult
    from fleet.service import open as open_fleet

    options = global_options(ctx)
    overrides: dict[str, float | None] = {}
    if raw_days is not None:
        overrides["raw_days"] = raw_days
    if rollup_days is not None:
        overrides["rollup_days"] = None if rollup_days == FOREVER else float(rollup_days)

    async def run() -> tuple[Settings, float, RetentionResult]:
        async with open_fleet(options.db_url, options.inventory_path) as service:
            # The settings the monitor runs with (fleet monitor, fleet serve), the given
            # options on top: the one place retention settings are read.
            try:
                settings = service.monitor_settings().with_values("retention", **overrides)
            except ValueError as exc:
                raise ConfigError(f"retention: {exc}") from exc
            retention = settings.retention
            now = time.time()
            if not options.as_json:
                click.echo(_retention_plan(settings, now))
            result = await service.apply_retention(retention, now)
            return settings, now, result

    settings, now, result = run_async(run)
    retention = settings.retention
    data = {"rollup_buckets": result.rollup.buckets,
            "rollup_5m_buckets": result.rollup_5m.buckets,
            "gpu_samples_deleted": result.pruned.gpu_samples,
            "host_samples_deleted": result.pruned.host_samples,
            "rollups_deleted": result.pruned.gpu_rollups,
            "rollups_5m_deleted": result.pruned.gpu_rollups_5m}
    if options.as_json:
        echo_json({**data, "raw_days": retention.raw_days, "rollup_days": retention.rollup_days,
                   "raw_before": now - retention.raw_days * DAY_S,
                   "rollup_before": None if retention.rollup_days is None
                   else now - retention.rollup_days * DAY_S,
                   "origins": {key: settings.origins.get(f"retention.{key}", "default")
                               for key in ("raw_days", "rollup_days")}})
    else:
        click.echo(", ".join(f"{key.replace('_', ' ')}: {value}" for key, value in data.items()))
    return 0


def _retention_plan(settings: Settings, now: float) -> str:
    """What one retention pass keeps and deletes, and where each value comes from."""
    from fleet.health.retention import DAY_S
    from fleet.timeparse import format_time

    retention = settings.retention

    def origin(key: str) -> str:
        return settings.origins.get(f"retention.{key}", "default")

    raw = (f"keeping raw samples {retention.raw_days:g} days (retention.raw_days, "
           f"{origin('raw_days')}): deleting those before "
           f"{format_time(now - retention.raw_days * DAY_S)} (GPU samples once rolled up)")
    if retention.rollup_days is None:
        rollups = (f"keeping 1- and 5-minute rollups forever (retention.rollup_days, "
                   f"{origin('rollup_days')})")
    else:
        rollups = (f"keeping 1- and 5-minute rollups {retention.rollup_days:g} days "
                   f"(retention.rollup_days, {origin('rollup_days')}): deleting those before "
                   f"{format_time(now - retention.rollup_days * DAY_S)}")
    return f"{raw}\n{rollups}"
