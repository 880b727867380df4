"""Unmanaged use: processes on a GPU that fleet did not start, and whose they are.

A process is fleet's when the GPU is held by a task and the process is in that task's session
(the task's wrapper is its session leader: its pid is the task's `remote_pid`), or when the GPU
is reserved and the process runs as the reservation's owner. Any other process gets one
`gpu_unmanaged_use` event naming its pid and Unix user (read by the probe from /proc): severity
info on a GPU nobody holds, warning on a GPU held by someone (a conflict). A process whose
session or user cannot be read (another pid namespace) is not judged on a held GPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleet.monitor.batch import EventIn
    from fleet.reports import ProcessInfo
    from fleet.snapshot import AllocationInfo, FleetSnapshot, GpuSnapshot


@dataclass(frozen=True)
class UnmanagedUse:
    """A GPU's processes that fleet did not start, and who holds the GPU (None: nobody)."""

    host: str
    gpu_index: int
    processes: tuple[ProcessInfo, ...]
    holder: AllocationInfo | None


def unmanaged_processes(gpu: GpuSnapshot, task_sessions: dict[int, int]) -> tuple[
        ProcessInfo, ...]:
    """The GPU's processes that are not its holder's (`task_sessions`: task id → remote_pid)."""
    holder = gpu.allocation
    found = gpu.reading.processes
    if holder is None:
        return tuple(found)
    if holder.kind == "task":
        session = task_sessions.get(holder.task_id) if holder.task_id is not None else None
        return tuple(p for p in found if p.session is not None and session is not None
                     and p.session != session)
    return tuple(p for p in found if p.user is not None and p.user != holder.owner)


class UnmanagedWatch:
    """Remembers which unmanaged pids were reported per GPU, and under which holder, so each is
    reported once; a new holder (the GPU reserved or given to a task since) reports them again.
    """

    def __init__(self) -> None:
        self._reported: dict[tuple[str, int], tuple[int | None, frozenset[int]]] = {}
        self._current: dict[tuple[str, int], tuple[ProcessInfo, ...]] = {}
        self.version = 0  # counts the checks that changed what `current` answers

    def check(self, snapshot: FleetSnapshot, task_sessions: dict[int, int]) -> list[UnmanagedUse]:
        """The GPUs with unmanaged processes not reported yet (only those new pids each)."""
        found: list[UnmanagedUse] = []
        seen: set[tuple[str, int]] = set()
        before = self.in_use()
        for host in snapshot.hosts:
            for gpu in host.gpus:
                key = (host.spec.name, gpu.index)
                seen.add(key)
                holder = gpu.allocation.allocation_id if gpu.allocation is not None else None
                others = unmanaged_processes(gpu, task_sessions)
                was_holder, was_reported = self._reported.get(key, (holder, frozenset()))
                known = was_reported if was_holder == holder else frozenset()
                new = tuple(p for p in others if p.pid not in known)
                # a pid that left is forgotten: if it comes back it is reported again
                self._reported[key] = (holder, frozenset(p.pid for p in others))
                self._current[key] = others
                if new:
                    found.append(UnmanagedUse(key[0], key[1], new, gpu.allocation))
        for gone in set(self._reported) - seen:
            del self._reported[gone]
            self._current.pop(gone, None)
        if self.in_use() != before:
            self.version += 1
        return found

    def in_use(self) -> dict[tuple[str, int], tuple[ProcessInfo, ...]]:
        """Each GPU (host, index) with processes fleet did not start, and those processes."""
        return {key: processes for key, processes in self._current.items() if processes}

    def current(self, key: tuple[str, int]) -> tuple[ProcessInfo, ...]:
        """The processes fleet did not start on GPU `key` (host, index), as last judged."""
        return self._current.get(key, ())

    def counts(self) -> dict[tuple[str, int], int]:
        """(host, GPU index) → how many processes fleet did not start run there now."""
        return {key: len(pids) for key, (_, pids) in self._reported.items() if pids}


def _who(process: ProcessInfo) -> str:
    if process.user:
        return process.user
    return f"uid {process.uid}" if process.uid is not None else "user unknown"


def unmanaged_event(use: UnmanagedUse, now: float | None = None) -> EventIn:
    """The `gpu_unmanaged_use` event for `use`."""
    from fleet.monitor.batch import EventIn

    listed = ", ".join(f"pid {p.pid} ({_who(p)}{', ' + p.name if p.name else ''})"
                       for p in use.processes)
    holder = use.holder
    on = ("" if holder is None else
          f" on {holder.owner}'s reservation" if holder.kind == "reservation" else
          f" on task {holder.task_id} of {holder.owner}")
    return EventIn(
        ts=now if now is not None else time.time(), kind="gpu_unmanaged_use",
        severity="info" if holder is None else "warning",
        message=f"{use.host} GPU {use.gpu_index}: process(es) fleet did not start{on}: {listed}",
        host=use.host, gpu_index=use.gpu_index,
        data={"pids": [p.pid for p in use.processes],
              "users": [p.user for p in use.processes],
              "uids": [p.uid for p in use.processes],
              "conflict": holder is not None,
              "holder": None if holder is None else holder.owner})
