"""The monitor's one-line summary of each interval, and the callback that receives it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


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
        return line


SummaryCallback = Callable[[MonitorSummary], None]
