"""Typed messages that workers post and screens handle (workers never touch widgets)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from fleet.snapshot import FleetSnapshot
from tui.service import (
    AllocationView,
    CandidateView,
    DiscoveryScope,
    EventView,
    GpuHistory,
    HostKeyFingerprint,
    PlacementPreview,
    TaskView,
    UserUsageView,
)


@dataclass
class SnapshotArrived(Message):
    """A new fleet snapshot; a newer one replaces an unhandled older one (coalescing)."""

    snapshot: FleetSnapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotArrived)


@dataclass
class ServiceFailed(Message):
    """An operation failed; `action` says what the operator was doing."""

    action: str
    error: str


@dataclass
class ActionDone(Message):
    """An operator action succeeded; `summary` is shown as a notification."""

    summary: str


@dataclass
class TasksLoaded(Message):
    """The task list was (re)loaded."""

    tasks: list[TaskView]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TasksLoaded)


@dataclass
class LogLines(Message):
    """New lines of the followed task's log."""

    task_id: int
    lines: list[str]


@dataclass
class EventsLoaded(Message):
    """The event list was (re)loaded, newest first."""

    events: list[EventView]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, EventsLoaded)


@dataclass
class AllocationsLoaded(Message):
    """The active allocations were (re)loaded."""

    allocations: list[AllocationView]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, AllocationsLoaded)


@dataclass
class UsageLoaded(Message):
    """The Users screen's figures were (re)loaded: usage over its window and who holds what."""

    usage: list[UserUsageView]
    allocations: list[AllocationView]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, UsageLoaded)


@dataclass
class CandidatesLoaded(Message):
    """The discovery candidates were (re)loaded, with where discovery looks for them."""

    candidates: list[CandidateView]
    scope: DiscoveryScope


@dataclass
class HistoryLoaded(Message):
    """GPU history of one host for the detail screen."""

    host: str
    history: list[GpuHistory]
    since: float
    until: float


@dataclass
class FingerprintFetched(Message):
    """A candidate's host key, ready for the operator to confirm."""

    candidate: CandidateView
    fingerprint: HostKeyFingerprint


@dataclass
class TaskSubmitted(Message):
    """The dispatch dialog's task was submitted; its log opens next."""

    task: TaskView


@dataclass
class CandidatesScanned(Message):
    """A discovery scan finished; `found` is how many candidates answered it."""

    found: int


@dataclass
class PreviewReady(Message):
    """The placement preview for the dispatch dialog."""

    preview: PlacementPreview
