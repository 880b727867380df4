"""`fleet usage`: GPU-hours held and busy, efficiency, tasks, failures and queue waits, per user,
group, host or GPU model, computed from the stored allocations, rollups and samples.

    async with fleet.open() as f:
        report = await f.usage(since=time.time() - 30 * 86400, by="user")
        for row in report.rows:
            print(row.key, row.gpu_hours, row.efficiency)

Definitions (the README's "Usage" section): a holding is an allocation cut to the window, held
until it was released, expired or its task ended (one still held counts until now, never
later); *busy* GPU-hours weigh each minute held by its GPU's average utilisation
(a minute without samples counts as not busy); efficiency is busy / held; a failure is a task
that ended `failed` or `lost`, or timed out; the queue wait is submitted → started.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

from fleet.errors import ConfigError

if TYPE_CHECKING:
    from db.sql import SqlReader
    from db.usage import Holding, SubmittedTask
    from fleet.context import FleetContext

UsageBy = Literal["user", "group", "host", "gpu-model"]
USAGE_BY: tuple[str, ...] = get_args(UsageBy)
FAILED_STATES = frozenset({"failed", "lost"})
NO_GROUP = "-"  # an owner that is no Unix user here (FLEET_OWNER in local mode)


@dataclass(frozen=True)
class UsageRow:
    """One user's (group's, host's, GPU model's) figures over the window."""

    key: str
    task_gpu_hours: float = 0.0
    reserved_gpu_hours: float = 0.0
    busy_gpu_hours: float = 0.0
    reserved_busy_gpu_hours: float = 0.0
    tasks: int = 0
    failures: int = 0
    reservations: int = 0  # the GPUs of one `fleet reserve` (one claim) count once
    median_wait_s: float | None = None  # of the tasks that started (None: none did)

    @property
    def gpu_hours(self) -> float:
        """GPU-hours held: tasks and reservations."""
        return self.task_gpu_hours + self.reserved_gpu_hours

    @property
    def efficiency(self) -> float | None:
        """Busy / held (None when nothing was held)."""
        return self.busy_gpu_hours / self.gpu_hours if self.gpu_hours > 0 else None

    @property
    def reservation_use(self) -> float | None:
        """How much of the reserved GPU-hours was busy (None without reservations)."""
        return (self.reserved_busy_gpu_hours / self.reserved_gpu_hours
                if self.reserved_gpu_hours > 0 else None)


@dataclass
class _Tally:
    """A row being summed up."""

    key: str
    task_seconds: float = 0.0
    reserved_seconds: float = 0.0
    busy_seconds: float = 0.0
    reserved_busy_seconds: float = 0.0
    tasks: int = 0
    failures: int = 0
    waits_s: list[float] = field(default_factory=list)
    reserved: set[int] = field(default_factory=set)  # the reservations' claim ids

    def row(self) -> UsageRow:
        return UsageRow(self.key, self.task_seconds / 3600, self.reserved_seconds / 3600,
                        self.busy_seconds / 3600, self.reserved_busy_seconds / 3600, self.tasks,
                        self.failures, len(self.reserved),
                        statistics.median(self.waits_s) if self.waits_s else None)


@dataclass(frozen=True)
class UsageReport:
    """The window, the grouping, and one row per key (most GPU-hours first)."""

    since: float
    until: float
    by: str
    rows: tuple[UsageRow, ...]


class UsageService:
    """Usage reports over the stored history."""

    def __init__(self, context: FleetContext) -> None:
        self.context = context

    async def usage(self, *, since: float, until: float | None = None,
                    by: str = "user") -> UsageReport:
        """Figures per `by` key over [since, until) (until: now; what is still held counts
        until now, however late `until` is); ConfigError for a bad `by` or an empty window."""
        if by not in USAGE_BY:
            raise ConfigError(f"--by must be one of {', '.join(USAGE_BY)}, not {by!r}")
        now = self.context.now()
        end = now if until is None else until
        if end <= since:
            raise ConfigError("the usage window is empty: --until is not after --since")
        holdings, busy, tasks = await self.context.query(
            "read usage", lambda reader: _load(reader, since, end, now))
        rows = [tally.row() for tally in _tally(holdings, busy, tasks, _keys(by)).values()]
        ordered = sorted(rows, key=lambda row: (-row.gpu_hours, row.key))
        return UsageReport(since, end, by, tuple(ordered))


def _load(reader: SqlReader, since: float, until: float, now: float) -> tuple[
        list[Holding], list[float], list[SubmittedTask]]:
    from db.usage import busy_seconds, holdings, minute_utilisation, submitted_tasks

    held = holdings(reader, since, until, now)
    minutes = minute_utilisation(reader, {h.gpu_id for h in held}, since, min(until, now))
    busy = [busy_seconds(h, minutes.get(h.gpu_id, {})) for h in held]
    return held, busy, submitted_tasks(reader, since, until)


KeyOf = Callable[[str, str | None, str | None], Iterable[str]]  # (owner, host, model) → keys


def _keys(by: str) -> KeyOf:
    if by == "user":
        return lambda owner, _host, _model: (owner,)
    if by == "host":
        return lambda _owner, host, _model: (host or "-",)
    if by == "gpu-model":
        return lambda _owner, _host, model: (model or "-",)
    from fleet.unix_groups import group_lookup

    groups_of = group_lookup()  # a user in several groups counts in each
    return lambda owner, _host, _model: groups_of(owner) or (NO_GROUP,)


def _tally(holdings: list[Holding], busy: list[float], tasks: list[SubmittedTask],
           keys_of: KeyOf) -> dict[str, _Tally]:
    tallies: dict[str, _Tally] = {}

    def tally(key: str) -> _Tally:
        return tallies.setdefault(key, _Tally(key))

    model_of_host: dict[str, str] = {}
    for holding, busy_s in zip(holdings, busy, strict=True):
        model_of_host.setdefault(holding.host, holding.gpu_model)
        for key in keys_of(holding.owner, holding.host, holding.gpu_model):
            found = tally(key)
            found.busy_seconds += busy_s
            if holding.kind == "reservation":
                found.reserved_seconds += holding.seconds
                found.reserved_busy_seconds += busy_s
                found.reserved.add(holding.claim_id)
            else:
                found.task_seconds += holding.seconds
    for task in tasks:
        for key in keys_of(task.owner, task.host, model_of_host.get(task.host or "")):
            found = tally(key)
            found.tasks += 1
            found.failures += task.state in FAILED_STATES or task.timed_out
            if task.wait_s is not None:
                found.waits_s.append(task.wait_s)
    return tallies
