"""Batched recording: buffered samples, state changes and events written in one transaction.

Host and GPU facts are upserted only when they differ from the last ones written (a cache per
host), so a steady fleet costs two executemany inserts, one UPDATE of last_seen, one SELECT of
the hosts' stored states and two of the drain flags per flush, all plain SQL
(fleet.monitor.flush_queries) in one Database.writer transaction: the stdlib driver on an
SQLite file, a session elsewhere. Host
outcomes are decided against those stored states (fleet.health.apply.record_host_outcome), so a
`fleet status` run in between is taken into account.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from db.hosts import host_states
from fleet.errors import FleetError, StorageError
from fleet.health.rules import HealthChange, HostSeed
from fleet.model import HostSpec, HostState
from fleet.monitor.batch import Batch, EventIn, HostOutcomeIn
from fleet.monitor.flush_queries import Drains, now_s, read_drains, touch_hosts
from fleet.monitor.thread_work import finish_in_thread
from fleet.reports import ProbeReport
from fleet.storage import storage_errors

if TYPE_CHECKING:
    from db.engine import Database
    from db.sql import SqlWriter
    from fleet.recorder import GpuSampleRow, HostSampleRow

log = logging.getLogger("fleet.monitor.writer")
T = TypeVar("T")

# Buffered rows kept while the database refuses writes; beyond this the oldest are dropped.
MAX_BACKLOG_FLUSHES = 10
# Events, and health changes, kept while the database refuses writes (each list); beyond this
# the oldest are dropped (fleet.monitor.batch.Batch.keep_newest_events), down to 90 % so that
# the trimming pass runs once per thousand new ones, not for each.
MAX_BACKLOG_EVENTS = 10_000
_TRIMMED_EVENTS = MAX_BACKLOG_EVENTS * 9 // 10
# What a refused flush raises (StorageError is a FleetError): its batch is kept for a retry.
WRITE_ERRORS = (FleetError, OSError, LookupError, ValueError)


@dataclass
class _Facts:
    """Each host's facts_key and GPU ids (idx → id) as written, and how many writes."""

    facts: dict[str, tuple[object, ...]] = field(default_factory=dict)
    gpu_ids: dict[str, dict[int, int]] = field(default_factory=dict)
    writes: int = 0


@dataclass
class WriterStats:
    """What the writer has done so far."""

    flushes: int = 0
    host_samples: int = 0
    gpu_samples: int = 0
    events: int = 0
    facts_writes: int = 0
    failed_flushes: int = 0
    dropped_reports: int = 0
    dropped_events: int = 0


class SampleWriter:
    """Buffers what the monitor sees and writes it in batches from a worker thread."""

    def __init__(self, database: Database, flush_rows: int, *, host_down_after: int = 3) -> None:
        self.database = database
        self.flush_rows = flush_rows
        self.host_down_after = host_down_after
        self.stats = WriterStats()
        self.drains = Drains()
        self._batch = Batch()
        self._host_ids: dict[str, int] = {}
        self._facts = _Facts()  # as committed; a flush's own writes join it after its commit
        self._lock = asyncio.Lock()
        self._applied: list[dict[str, object]] = []
        self._stored_states: dict[str, HostState] = {}
        # Since a write was refused and until one succeeds, the buffer keeps at most
        # backlog_rows rows at any moment (the oldest readings go first, counted).
        self._refused = False
        # Set when the buffer should be written now rather than at the next flush interval:
        # it holds flush_rows rows, or something others act on (events, state changes).
        self.due = asyncio.Event()

    async def register_hosts(self, specs: list[HostSpec]) -> list[HostSeed]:
        """Insert or update monitored hosts' rows; returns the stored health state to resume.

        Called before the first flush, and again with each host added while the monitor runs.
        """
        from db.hosts import sync_hosts
        from fleet.health.apply import load_health_seeds
        from fleet.recorder import host_facts

        def register() -> tuple[dict[str, int], list[HostSeed]]:
            with self.database.session() as session:
                ids = sync_hosts(session, [host_facts(spec) for spec in specs], now_s())
                seeds = load_health_seeds(session)
            return ids, seeds

        ids, seeds = await asyncio.to_thread(
            self._guarded, "register the monitored hosts", register)
        self._host_ids = {**self._host_ids, **ids}  # a new dict: a flush thread may read the old
        return [seed for seed in seeds if seed.host in ids]

    @property
    def backlog_rows(self) -> int:
        """The most sample rows kept while the database refuses writes."""
        return max(1, self.flush_rows * MAX_BACKLOG_FLUSHES)

    def add_report(self, host: str, report: ProbeReport) -> None:
        """Buffer one reading of `host`."""
        batch = self._batch
        batch.add_report(host, report)
        if batch.gpu_rows >= self.flush_rows:
            self.due.set()
        if self._refused and batch.gpu_rows > self.backlog_rows:
            self.stats.dropped_reports += batch.keep_newest(self.backlog_rows)

    def add_host_outcome(self, outcome: HostOutcomeIn) -> None:
        """Buffer one outcome of a host (fleet.monitor.batch.Batch.add_outcome: a good one
        after a good one adds nothing; a repeated failure past the rule's decision replaces)."""
        self._batch.add_outcome(outcome, self.host_down_after)

    def add_event(self, event: EventIn) -> None:
        """Buffer an event row, to be written at once (hooks and readers wait for it)."""
        self._batch.events.append(event)
        self._bound_events()
        self.due.set()

    def add_health_changes(self, changes: list[HealthChange], now: float) -> None:
        """Buffer health rule decisions (states and events, written after the samples' facts),
        to be written at once."""
        if changes:
            self._batch.health.extend((change, now) for change in changes)
            self._bound_events()
            self.due.set()

    def _bound_events(self) -> None:
        """While writes are refused, keep at most MAX_BACKLOG_EVENTS events and health changes
        (the newest; counted in stats.dropped_events)."""
        batch = self._batch
        if self._refused and max(len(batch.events), len(batch.health)) > MAX_BACKLOG_EVENTS:
            self.stats.dropped_events += batch.keep_newest_events(_TRIMMED_EVENTS)

    def take_applied_events(self) -> list[dict[str, object]]:
        """Event payloads (with their row ids) of health changes written since the last call."""
        events, self._applied = self._applied, []
        return events

    def take_stored_states(self) -> dict[str, HostState]:
        """Host states as written by the flushes since the last call, for hosts with no newer
        outcome buffered (those are still to be decided)."""
        pending = {outcome.host for outcome in self._batch.outcomes}
        states = {host: state for host, state in self._stored_states.items()
                  if host not in pending}
        self._stored_states = {}
        return states

    @property
    def buffered_rows(self) -> int:
        """Sample rows waiting for the next flush."""
        return self._batch.gpu_rows

    @property
    def buffered_outcomes(self) -> int:
        """Host outcomes waiting for the next flush."""
        return len(self._batch.outcomes)

    async def flush(self) -> int:
        """Write everything buffered in one transaction; returns GPU sample rows written.

        On a database error the batch is kept for the next flush (bounded) and 0 is returned.
        """
        async with self._lock:
            batch, self._batch = self._batch, Batch()
            self.due.clear()
            if batch.is_empty():
                await self.refresh_drains()
                return 0
            try:
                # A cancelled caller (Monitor.stop cancels the flush loop) returns only once the
                # transaction ends, and the lock is held till then: stop's last flush follows it.
                written = await finish_in_thread(
                    lambda: self._guarded("write samples", self._write, batch),
                    settle=lambda write: self._settle(batch, write))
            except WRITE_ERRORS as exc:
                self._keep_for_retry(batch, exc)
                return 0
            self._refused = False
            return written

    def _settle(self, batch: Batch, write: asyncio.Future[int]) -> None:
        """Account for a write whose caller was cancelled: a refused batch is kept for the
        next flush as in `flush`, any other failure is logged (nobody is left to raise to)."""
        exc = write.exception()
        if exc is None:
            self._refused = False
        elif isinstance(exc, WRITE_ERRORS):
            self._keep_for_retry(batch, exc)
        else:
            log.error("writing %d readings failed", len(batch.reports), exc_info=exc)

    def _keep_for_retry(self, batch: Batch, exc: BaseException) -> None:
        self.stats.failed_flushes += 1
        self._refused = True
        log.error("cannot write %d readings to the database: %s", len(batch.reports), exc)
        kept = batch.then(self._batch, self.host_down_after)
        self.stats.dropped_reports += kept.keep_newest(self.backlog_rows)
        self.stats.dropped_events += kept.keep_newest_events(MAX_BACKLOG_EVENTS)
        self._batch = kept

    async def refresh_drains(self) -> None:
        """Read the stored drain flags into `drains` (an error is logged: the old ones stay)."""
        try:
            self.drains = await asyncio.to_thread(self._guarded, "read drain flags",
                                                  self._read_drains_only)
        except StorageError as exc:
            log.error("%s", exc)

    def _guarded(self, action: str, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` with database errors as StorageError (fleet/storage.py)."""
        with storage_errors(action, self.database.url):
            return work(*args)

    def _read_drains_only(self) -> Drains:
        with self.database.reader() as reader:
            return read_drains(reader)

    def _write(self, batch: Batch) -> int:
        """The flush's transaction (runs in a worker thread)."""
        from db.samples import record_sample_rows

        learned = _Facts()
        reported, now = {host for host, _ in batch.reports}, now_s()
        with self.database.writer() as writer:
            states = self._touch_hosts(writer, reported, now)
            applied, stored, ruled = self._write_outcomes(writer, batch.outcomes, states)
            host_samples, gpu_samples = self._samples(writer, batch.reports, learned)
            applied += self._write_health(writer, batch.health)
            self._write_events(writer, batch.events, learned)
            # The host rule and new facts wrote last_seen as of the reading: the flush's own
            # time stays the last word for every host that reported (rare: a steady flush
            # writes neither).
            touch_hosts(writer, self._ids_of(reported & (ruled | learned.facts.keys())), now)
            self.drains = read_drains(writer)  # before record_sample_rows' commit: one commit
            record_sample_rows(writer, host_samples, gpu_samples)
        # Committed: only now may later flushes rely on what this one wrote (a rolled-back
        # transaction's GPU rows do not exist, and its ids may go to other rows).
        self._facts.facts.update(learned.facts)
        self._facts.gpu_ids.update(learned.gpu_ids)
        self.stats.facts_writes += learned.writes
        self._applied.extend(applied)
        self._stored_states.update(stored)
        self.stats.flushes += 1
        self.stats.host_samples += len(host_samples)
        self.stats.gpu_samples += len(gpu_samples)
        self.stats.events += len(batch.events) + len(applied)
        return len(gpu_samples)

    def _write_outcomes(
        self, writer: SqlWriter, outcomes: list[HostOutcomeIn], states: dict[int, str]
    ) -> tuple[list[dict[str, object]], dict[str, HostState], set[str]]:
        """Each outcome through the host rule, in order; returns hook payloads, final states
        and the hosts the rule wrote.

        `states` holds the stored state of the hosts already read (those just touched); the
        others' are read here in one SELECT. A good outcome of a host stored "up" changes
        nothing (host_transition: no write, no event), so only the others go through the rule.
        """
        from fleet.health.apply import record_host_outcome

        unread = sorted({self._host_ids[o.host] for o in outcomes
                         if o.host in self._host_ids} - states.keys())
        if unread:
            states.update(host_states(writer, unread))
        events: list[dict[str, object]] = []
        stored: dict[str, HostState] = {}
        ruled: set[str] = set()
        for outcome in outcomes:
            host_id = self._host_ids.get(outcome.host)
            if host_id is None or host_id not in states:
                continue
            if outcome.outcome == "up" and states[host_id] == "up":
                stored[outcome.host] = "up"
                continue
            recorded = record_host_outcome(
                writer, host_id, outcome.host, outcome.outcome, outcome.reason,
                failures=outcome.failures, down_after=self.host_down_after, now=outcome.ts,
            )
            states[host_id] = recorded.state
            stored[outcome.host] = recorded.state
            ruled.add(outcome.host)
            if recorded.applied is not None:
                events.append(recorded.applied.event)
        return events, stored, ruled

    def _samples(
        self, writer: SqlWriter, reports: list[tuple[str, ProbeReport]], learned: _Facts
    ) -> tuple[list[HostSampleRow], list[GpuSampleRow]]:
        from fleet.recorder import facts_key, gpu_sample_row, host_sample_row, record_report_facts

        host_samples: list[HostSampleRow] = []
        gpu_samples: list[GpuSampleRow] = []
        for host, report in reports:
            host_id = self._host_ids.get(host)
            if host_id is None:
                continue
            facts = facts_key(report)
            # What this transaction wrote earlier, else what committed flushes wrote.
            cache = learned if host in learned.facts else self._facts
            known, ids = cache.facts.get(host), cache.gpu_ids.get(host)
            if ids is None or known != facts:
                ids = record_report_facts(
                    writer, host_id, host, report, int(report.timestamp), events=False
                )
                learned.facts[host], learned.gpu_ids[host] = facts, ids
                learned.writes += 1
            ts_ms = int(report.timestamp * 1000)
            host_samples.append(host_sample_row(host_id, ts_ms, report))
            gpu_samples.extend(
                gpu_sample_row(ids[gpu.index], ts_ms, gpu)
                for gpu in report.gpus if gpu.index in ids
            )
        return host_samples, gpu_samples

    def _write_health(
        self, writer: SqlWriter, changes: list[tuple[HealthChange, float]]
    ) -> list[dict[str, object]]:
        from fleet.health.apply import apply_health_changes

        events: list[dict[str, object]] = []
        for change, now in changes:
            events.extend(
                applied.event for applied in apply_health_changes(writer, [change], now)
            )
        return events

    def _write_events(self, writer: SqlWriter, events: list[EventIn], learned: _Facts) -> None:
        from db.events import add_event

        for event in events:
            host_id = self._host_ids.get(event.host) if event.host else None
            gpu_id = None
            if event.host is not None and event.gpu_index is not None:
                ids = learned.gpu_ids.get(event.host) or self._facts.gpu_ids.get(event.host, {})
                gpu_id = ids.get(event.gpu_index)
            add_event(
                writer, ts=int(event.ts), kind=event.kind, severity=event.severity,
                message=event.message, host_id=host_id, gpu_id=gpu_id, data=event.data,
            )

    def _touch_hosts(self, writer: SqlWriter, hosts: set[str], now: int) -> dict[int, str]:
        """last_seen / last_probe_at of every host that reported, in one UPDATE; returns their
        stored states by id (one SELECT)."""
        ids = self._ids_of(hosts)
        if not ids:
            return {}
        touch_hosts(writer, ids, now)
        return host_states(writer, ids)

    def _ids_of(self, hosts: set[str]) -> list[int]:
        return sorted(self._host_ids[host] for host in hosts if host in self._host_ids)
