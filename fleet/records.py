"""The stored records the service API returns, named here so front ends never import `db`.

The CLI, the TUI and the server type their values with these names; they are the storage
layer's frozen dataclasses, unchanged.
"""

from __future__ import annotations

from db.rows import AllocationDetail, EventView, HostHistoryPoint, TaskGpu, TaskRow, UnmanagedGpu
from db.types import GpuHistoryPoint, HostRow, LatestGpu, Severity

__all__ = ["AllocationDetail", "EventView", "GpuHistoryPoint", "HostHistoryPoint", "HostRow",
           "LatestGpu", "Severity", "TaskGpu", "TaskRow", "UnmanagedGpu"]
