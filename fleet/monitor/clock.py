"""Each host's clock offset from the controller's, so that samples are stored at controller time.

A probe stamps its readings with the host's clock, but the rollups close minutes against the
controller's (db.retention: controller time minus a lag): a reading stamped minutes in the past
lands in a minute already rolled up and is missing from every bucketed history and from usage,
one stamped in the future sits ahead of everything else. So the monitor measures, per host,
offset = (controller time when a line arrives) - (the line's `ts`), which is the clock offset
plus that line's delay (the probe's write, SSH, the controller's event loop); the smallest
offset over recent lines is the least delayed one, the best estimate of the clock offset
alone. Within CLOCK_SKEW_TOLERANCE_S the host's own times are kept as they are; beyond it every
reading is stored at its own `ts` plus the estimate (not at its arrival time: the spacing and
order of one host's readings stay exact), and the host is said to be skewed (one `clock_skew`
event) until the estimate comes back within CLOCK_SKEW_RECOVERED_S (another one).

"Recent" is a window of two blocks of lines, each of at least WINDOW_LINES lines and
WINDOW_S seconds: a clock stepped forward (a lagging host fixed by NTP) shows at its first
line, one stepped back within one or two blocks.
"""

from __future__ import annotations

import math

# Skew beyond this (seconds, either way) is corrected and reported; NTP keeps clocks within
# milliseconds, and within a few seconds the host's own times harm nothing.
CLOCK_SKEW_TOLERANCE_S = 5.0
# A skewed host counts as in step again only within this (hysteresis: no flapping events).
CLOCK_SKEW_RECOVERED_S = 2.0
# While skewed, the correction follows the estimate once they differ by more than this (the
# estimate moves by the delays' jitter; a constant correction keeps a host's spacing exact).
CORRECTION_STEP_S = 1.0
WINDOW_LINES = 4
WINDOW_S = 15.0


class ClockOffset:
    """One host's clock offset, estimated from its lines as they arrive (see the module doc).

    `correction` is what to add to the host's timestamps (0.0 while in step), `skewed` whether
    the host is beyond the tolerance. O(1) per line, a few float operations.
    """

    __slots__ = ("_block_end", "_lines", "_minimum", "_previous", "correction", "skewed")

    def __init__(self) -> None:
        self.correction = 0.0
        self.skewed = False
        self._minimum = math.inf   # the smallest offset of the current block
        self._previous = math.inf  # of the block before
        self._lines = 0
        self._block_end = 0.0      # the first block ends after WINDOW_LINES lines

    @property
    def estimate(self) -> float:
        """The smallest offset over the recent lines (inf before the first line)."""
        return min(self._minimum, self._previous)

    def observe(self, host_ts: float, arrival: float) -> bool:
        """Take one reading's host `ts` and its arrival time on the controller's clock; True
        when `skewed` changed (`correction` may change either way)."""
        offset = arrival - host_ts
        minimum = self._minimum
        if offset < minimum:
            self._minimum = minimum = offset
        self._lines += 1
        previous = self._previous
        if self._lines >= WINDOW_LINES and arrival >= self._block_end:  # a new block
            self._previous = previous = minimum
            self._minimum, self._lines, self._block_end = math.inf, 0, arrival + WINDOW_S
        estimate = minimum if minimum < previous else previous
        if not self.skewed:
            if -CLOCK_SKEW_TOLERANCE_S <= estimate <= CLOCK_SKEW_TOLERANCE_S:
                return False
            self.skewed, self.correction = True, estimate
            return True
        if -CLOCK_SKEW_RECOVERED_S <= estimate <= CLOCK_SKEW_RECOVERED_S:
            self.skewed, self.correction = False, 0.0
            return True
        moved = estimate - self.correction
        if moved > CORRECTION_STEP_S or moved < -CORRECTION_STEP_S:
            self.correction = estimate
        return False


def one_shot_time(host_ts: float, arrival: float) -> float:
    """When a one-shot probe's reading was taken, on the controller's clock: its own `ts`,
    unless that is more than CLOCK_SKEW_TOLERANCE_S away from the reply's arrival (`fleet
    status` has one line, so its arrival is the best estimate there is)."""
    if abs(arrival - host_ts) > CLOCK_SKEW_TOLERANCE_S:
        return arrival
    return host_ts


def describe_offset(offset: float) -> str:
    """`offset` (controller minus host) in words: "300.0 s behind" / "12.5 s ahead of"."""
    return f"{abs(offset):.1f} s {'behind' if offset > 0 else 'ahead of'}"
