"""The stored records the service API returns, named here so front ends never import `db`.

The CLI, the TUI and the server type their values with these names; they are the storage
layer's frozen dataclasses, unchanged.
"""

from __future__ import annotations

from db.allocation_details import AllocationDetail
from db.event_queries import EventView
from db.host_history import HostHistoryPoint
from db.tasks import TaskGpu, TaskRow
from db.types import GpuHistoryPoint, HostRow, LatestGpu, Severity
from db.unmanaged import UnmanagedGpu

__all__ = ["AllocationDetail", "EventView", "GpuHistoryPoint", "HostHistoryPoint", "HostRow",
           "LatestGpu", "Severity", "TaskGpu", "TaskRow", "UnmanagedGpu"]
