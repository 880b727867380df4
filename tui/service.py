"""What the TUI needs from fleet: the `FleetService` protocol and the small view types it returns.

The live view uses fleet's own snapshot types (fleet.snapshot); everything else is a TUI-side
frozen dataclass so the screens never depend on how fleet stores it. Times are epoch seconds.
Tests drive the app with a fake implementation; tui/adapter.py implements it over `fleet.Fleet`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fleet.placement.request import MemorySize
from fleet.snapshot import FleetSnapshot


@dataclass(frozen=True)
class HistoryPoint:
    """One (possibly bucketed) sample of one GPU; ts in epoch seconds, None = not reported."""

    ts: float
    util_pct: float | None
    memory_used_bytes: float | None
    temperature_c: float | None
    power_w: float | None


@dataclass(frozen=True)
class GpuHistory:
    """The samples of one GPU of a host over the requested window, oldest first."""

    host: str
    index: int
    points: tuple[HistoryPoint, ...]


@dataclass(frozen=True)
class TaskView:
    """One task as the tasks screen shows it (sacct-like)."""

    task_id: int
    name: str
    state: str
    owner: str
    host: str | None = None
    gpus: tuple[int, ...] = ()
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    error: str | None = None

    @property
    def is_active(self) -> bool:
        """Queued or running: it can still be cancelled."""
        return self.state in {"queued", "placing", "starting", "running"}


@dataclass(frozen=True)
class EventView:
    """One fleet event (health change, host down, task finished, drain...)."""

    event_id: int
    ts: float
    severity: str  # info | warning | error | critical
    kind: str
    message: str
    host: str | None = None
    gpu_index: int | None = None
    task_id: int | None = None


@dataclass(frozen=True)
class AllocationView:
    """An active allocation: a task's GPU or an operator reservation."""

    allocation_id: int
    kind: str  # task | reservation
    owner: str
    host: str
    gpu_index: int
    created_at: int  # epoch seconds
    task_id: int | None = None
    expires_at: int | None = None  # epoch seconds; None: until released
    note: str | None = None
    idle_since: int | None = None  # epoch seconds: its GPU has been idle since


@dataclass(frozen=True)
class UserUsageView:
    """One user's GPU time over a window (fleet usage), for the Users screen."""

    user: str
    gpu_hours: float
    busy_gpu_hours: float
    efficiency: float | None
    tasks: int
    failures: int


@dataclass(frozen=True)
class CandidateView:
    """A discovered host that is not (yet) in the fleet; `key` identifies it for adopt()."""

    key: str
    name: str
    address: str
    port: int
    source: str  # which mDNS service type (or other source) announced it
    state: str = "seen"  # seen | gone | adopted
    gpu_summary: str | None = None
    last_seen: float | None = None


@dataclass(frozen=True)
class HostKeyFingerprint:
    """A candidate's SSH host key as the operator must confirm it before adopting."""

    key_type: str
    sha256: str  # "SHA256:..." as OpenSSH prints it


@dataclass(frozen=True)
class DispatchRequest:
    """What the dispatch dialog asks for: a script, its arguments, GPUs and constraints."""

    script: str
    args: tuple[str, ...] = ()
    gpus: int = 1
    min_free_memory: MemorySize | None = None  # as fleet.placement.request parses it
    hosts: str | None = None  # a --hosts pattern
    name: str | None = None


@dataclass(frozen=True)
class PlacementPreview:
    """The scheduler's answer before submitting: chosen GPUs (or none) and why."""

    feasible: bool
    host: str | None
    gpu_indices: tuple[int, ...]
    explanation: tuple[str, ...] = field(default=())  # the eligible GPUs, best first
    exclusions: tuple[str, ...] = field(default=())  # "host[:gpu]: why not", one per line


@dataclass(frozen=True)
class DiscoveryScope:
    """Where discovery looks: mDNS service types and interfaces (empty: every interface)."""

    service_types: tuple[str, ...]
    interfaces: tuple[str, ...]


class FleetService(Protocol):
    """Every operation the TUI performs; each may raise FleetError (shown in the UI)."""

    def watch(self) -> AsyncIterator[FleetSnapshot]:
        """Live snapshots, the first one as soon as possible, then one per change/interval."""
        ...

    async def gpu_history(self, host: str, since: float, until: float) -> list[GpuHistory]:
        """Per-GPU samples of `host` between two epoch times (bucketed by the service)."""
        ...

    async def tasks(self) -> list[TaskView]:
        """Recent and active tasks, newest first."""
        ...

    def log_tail(self, task_id: int) -> AsyncIterator[str]:
        """The task's log: the last lines, then new lines as they arrive (ends with the task)."""
        ...

    async def cancel(self, task_id: int) -> None:
        """Cancel a queued or running task."""
        ...

    async def events(self, limit: int = 500, *, host: str | None = None) -> list[EventView]:
        """The most recent `limit` events (only `host`'s when given), newest first."""
        ...

    async def allocations(self) -> list[AllocationView]:
        """Active allocations and reservations."""
        ...

    async def usage(self, since: float) -> list[UserUsageView]:
        """Each user's GPU-hours held and busy since `since` (most first)."""
        ...

    async def reserve(
        self, host: str, gpu_indices: Sequence[int], duration_s: float | None, note: str | None
    ) -> list[AllocationView]:
        """Reserve GPUs for the operator (raises AllocationConflict if any is taken)."""
        ...

    async def release(self, allocation_id: int) -> None:
        """Release a reservation."""
        ...

    async def drain(self, host: str, gpu_index: int | None, reason: str) -> None:
        """Stop placing work on a host (gpu_index None) or on one GPU."""
        ...

    async def undrain(self, host: str, gpu_index: int | None) -> None:
        """Allow placement again."""
        ...

    async def candidates(self) -> list[CandidateView]:
        """Hosts discovery has seen that are not in the fleet."""
        ...

    async def host_key(self, candidate_key: str) -> HostKeyFingerprint:
        """Fetch the candidate's SSH host key so the operator can compare its fingerprint."""
        ...

    async def adopt(self, candidate_key: str, fingerprint: HostKeyFingerprint) -> str:
        """Pin exactly the confirmed key and add the candidate; returns the managed host's name.

        Raises HostKeyRejected when the host now presents another key.
        """
        ...

    async def scan(self) -> list[CandidateView]:
        """Browse the network once (a few seconds), record what answers; the candidates."""
        ...

    async def discovery_scope(self) -> DiscoveryScope:
        """What discovery browses for and where (shown when nothing was found)."""
        ...

    async def preview(self, request: DispatchRequest) -> PlacementPreview:
        """Where the request would run now, with the scheduler's explanation."""
        ...

    async def dispatch(self, request: DispatchRequest) -> TaskView:
        """Submit the request (detached); returns the new task."""
        ...

    def suggested_scripts(self) -> list[str]:
        """Scripts to offer in the dispatch dialog (e.g. the demo's tasks)."""
        ...
