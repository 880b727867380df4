"""Records that db's read queries return, importable without SQLAlchemy.

Front ends and the remote client (which decodes the server's answers into them) import these
and nothing else of db.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from db.types import FINAL_TASK_STATES


@dataclass(frozen=True, slots=True)
class TaskGpu:
    """One GPU a task was allocated, with the allocation that held it (active or released)."""

    allocation_id: int
    gpu_id: int
    host: str
    idx: int
    uuid: str | None
    active: bool


@dataclass(frozen=True, slots=True)
class TaskRow:
    """A stored task; `host` is the host's name once placed, `gpus` its allocated GPUs by index."""

    id: int
    name: str
    script: str
    args: tuple[str, ...]
    host_id: int | None
    host: str | None
    state: str
    exit_code: int | None
    gpus_requested: int
    constraints: dict[str, Any]
    priority: int
    owner: str
    remote_dir: str | None
    remote_pid: int | None
    submitted_at: int
    started_at: int | None
    ended_at: int | None
    error: str | None
    gpu_seconds: float | None
    peak_memory_bytes: int | None
    gpus: tuple[TaskGpu, ...] = ()
    timed_out: bool = False  # stopped for running past its --timeout
    group_id: int | None = None  # a gang's or array's id (its first member's task id)
    group_kind: str | None = None  # "gang" | "array"
    group_index: int | None = None  # the node's rank, or the array index

    @property
    def is_final(self) -> bool:
        """True once the task has ended (succeeded, failed, cancelled or lost)."""
        return self.state in FINAL_TASK_STATES


@dataclass(frozen=True, slots=True)
class AllocationDetail:
    """An allocation with where its GPU is (host name, index, UUID) and its task's name/state."""

    id: int
    gpu_id: int
    host: str
    gpu_idx: int
    uuid: str | None
    kind: str
    owner: str
    task_id: int | None
    task_name: str | None
    task_state: str | None
    note: str | None
    created_at: int
    expires_at: int | None
    released_at: int | None
    release_reason: str | None
    idle_since: int | None = None  # since when its GPU is idle (fleet.placement.idle)

    @property
    def active(self) -> bool:
        """True while the allocation holds its GPU."""
        return self.released_at is None


@dataclass(frozen=True, slots=True)
class EventView:
    """A stored event with its host's name and GPU index, when it concerns one."""

    id: int
    ts: int
    kind: str
    severity: str
    message: str
    host: str | None
    gpu_idx: int | None
    gpu_uuid: str | None
    task_id: int | None
    data: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HostHistoryPoint:
    """One raw sample, or one bucket (ts_ms = bucket start), of one host.

    Network counters are the host's cumulative byte counters; `net_*_bps` is the increase per
    second within the bucket (None for a raw sample or a bucket with one sample), summed from
    consecutive samples; after a counter reset (a reboot) the new value counts from zero.
    """

    host: str
    ts_ms: int
    samples: int
    load_1m_avg: float | None
    load_1m_max: float | None
    cpu_busy_avg: float | None
    cpu_busy_max: float | None
    memory_available_min: int | None
    memory_available_avg: float | None
    net_rx_bytes: int | None
    net_tx_bytes: int | None
    net_rx_bps: float | None
    net_tx_bps: float | None


@dataclass(frozen=True)
class UnmanagedGpu:
    """A GPU with processes fleet did not start: each a mapping of pid, name, uid and user."""

    host: str
    gpu_idx: int
    uuid: str | None
    processes: tuple[Mapping[str, Any], ...]
