"""The monitor's one-line summary of each interval, and the callback that receives it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleet.snapshot import HostSnapshot


@dataclass(frozen=True)
class MonitorSummary:
    """One interval's one-line summary."""

    at: float
    hosts_up: int
    hosts_down: int
    gpus: int
    gpus_hot: int
    gpus_failed: int
    samples_written: int
    buffered: int
    failed_flushes: int = 0  # since start: writes the database refused (kept for a retry)
    readings_dropped: int = 0  # since start: readings let go when the retry buffer was full
    events_dropped: int = 0  # since start: events let go when the retry buffer was full

    def line(self) -> str:
        """`hosts 7 up 1 down | GPUs 56 (2 hot, 1 failed) | 448 samples written`, and what the
        database did not take while it was unavailable."""
        stamp = time.strftime("%H:%M:%S", time.localtime(self.at))
        line = (
            f"{stamp} hosts {self.hosts_up} up {self.hosts_down} down | GPUs {self.gpus} "
            f"({self.gpus_hot} hot, {self.gpus_failed} failed) | "
            f"{self.samples_written} samples written"
        )
        if self.failed_flushes:
            line += f" | {self.failed_flushes} writes failed, {self.buffered} rows buffered"
        if self.readings_dropped:
            line += f" | {self.readings_dropped} readings dropped (buffer full)"
        if self.events_dropped:
            line += f" | {self.events_dropped} events dropped (buffer full)"
        return line


SummaryCallback = Callable[[MonitorSummary], None]


def summarize(hosts: Iterable[HostSnapshot], samples_written: int, *, buffered: int,
              failed_flushes: int, readings_dropped: int,
              events_dropped: int = 0) -> MonitorSummary:
    """The summary of these host states now (`samples_written` since the last summary)."""
    shown = list(hosts)
    gpus = [gpu for host in shown if host.state == "up" for gpu in host.gpus]
    return MonitorSummary(
        at=time.time(),
        hosts_up=sum(1 for host in shown if host.state == "up"),
        hosts_down=sum(1 for host in shown if host.state not in ("up", "unknown")),
        gpus=len(gpus),
        gpus_hot=sum(1 for gpu in gpus if gpu.state == "hot"),
        gpus_failed=sum(1 for gpu in gpus if gpu.state in ("failed", "degraded", "lost")),
        samples_written=samples_written,
        buffered=buffered,
        failed_flushes=failed_flushes,
        readings_dropped=readings_dropped,
        events_dropped=events_dropped,
    )
