"""What the monitor's writer holds for its next flush, kept bounded while writes are refused."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleet.health.rules import HealthChange
from fleet.model import HostOutcome
from fleet.reports import ProbeReport

if TYPE_CHECKING:
    from db.types import Severity


@dataclass(frozen=True)
class EventIn:
    """An event to record; host and GPU are named (ids are resolved at write time)."""

    ts: float
    kind: str
    severity: Severity
    message: str
    host: str | None = None
    gpu_index: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HostOutcomeIn:
    """One outcome of a host to record, with the consecutive failures counted so far."""

    host: str
    outcome: HostOutcome
    reason: str | None
    failures: int
    ts: float


@dataclass
class Batch:
    """Readings, host outcomes, events and health changes waiting for one flush."""

    reports: list[tuple[str, ProbeReport]] = field(default_factory=list)
    outcomes: list[HostOutcomeIn] = field(default_factory=list)
    last_outcome: dict[str, HostOutcome] = field(default_factory=dict)
    outcome_at: dict[str, int] = field(default_factory=dict)  # host → its last in `outcomes`
    events: list[EventIn] = field(default_factory=list)
    health: list[tuple[HealthChange, float]] = field(default_factory=list)
    gpu_rows: int = 0  # sample rows of `reports`: one per GPU and one for the host

    def is_empty(self) -> bool:
        """Whether the flush has nothing to write."""
        return not (self.reports or self.outcomes or self.events or self.health)

    def add_report(self, host: str, report: ProbeReport) -> None:
        """Add one reading of `host`."""
        self.reports.append((host, report))
        self.gpu_rows += len(report.gpus) + 1

    def add_outcome(self, outcome: HostOutcomeIn, down_after: int) -> None:
        """Add one outcome of a host; a good one right after a good one adds nothing, and a
        failure repeating the one before, past the host rule's decision, takes its place."""
        host = outcome.host
        if outcome.outcome == "up" and self.last_outcome.get(host) == "up":
            return
        self.last_outcome[host] = outcome.outcome
        at = self.outcome_at.get(host)
        if at is not None and _repeats(self.outcomes[at], outcome, down_after):
            self.outcomes[at] = outcome
            return
        self.outcome_at[host] = len(self.outcomes)
        self.outcomes.append(outcome)

    def keep_newest(self, max_rows: int) -> int:
        """Drop the oldest readings until the rest make at most `max_rows` sample rows;
        returns how many were dropped."""
        rows = 0
        kept: list[tuple[str, ProbeReport]] = []
        dropped = 0
        for host, report in reversed(self.reports):
            rows += len(report.gpus) + 1
            if rows > max_rows:
                dropped = len(self.reports) - len(kept)
                break
            kept.append((host, report))
        kept.reverse()
        self.reports = kept
        self.gpu_rows = sum(len(report.gpus) + 1 for _, report in kept)
        return dropped

    def keep_newest_events(self, max_events: int) -> int:
        """Drop the oldest events and health changes until each list holds at most
        `max_events`; returns how many were dropped.

        A health change also sets its GPU's stored state, so the newest change of each GPU (and
        of each host's facts) is kept whatever its age: the database ends in the states the
        tracker holds, and only older transitions lose their event rows.
        """
        dropped = max(0, len(self.events) - max_events)
        if dropped:
            self.events = self.events[dropped:]
        excess = len(self.health) - max_events
        if excess <= 0:
            return dropped
        newest = {(change.host, change.gpu_index): position
                  for position, (change, _) in enumerate(self.health)}
        last_changes = set(newest.values())
        kept: list[tuple[HealthChange, float]] = []
        for position, item in enumerate(self.health):
            if excess > 0 and position not in last_changes:
                excess -= 1
                dropped += 1
                continue
            kept.append(item)
        self.health = kept
        return dropped

    def then(self, later: Batch, down_after: int) -> Batch:
        """This (refused) batch followed by `later`, as one batch for the retry."""
        merged = Batch(reports=self.reports + later.reports, events=self.events + later.events,
                       health=self.health + later.health,
                       gpu_rows=self.gpu_rows + later.gpu_rows)
        for outcome in self.outcomes + later.outcomes:
            merged.add_outcome(outcome, down_after)
        return merged


def _repeats(earlier: HostOutcomeIn, later: HostOutcomeIn, down_after: int) -> bool:
    """Whether `later` leaves the host as `earlier` would have: both the same failure and
    `earlier` past the failure the rule turns into a state and its event (so it only refreshes
    the state's reason and time, which `later` does too). This bounds what a failing host
    buffers while the database refuses writes."""
    return later.outcome == earlier.outcome != "up" and earlier.failures > down_after
