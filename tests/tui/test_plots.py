"""History plots: no sample is blank (not 0 %), and values scale against a known maximum."""

from __future__ import annotations

from tests.tui.fake_service import GIB
from tui import format as fmt
from tui.screens.host_detail import binned, plot_maximum
from tui.service import HistoryPoint
from tui.widgets.history_plot import NO_SAMPLE, plot_text


def point(ts: float, util: float | None = None, memory: float | None = None) -> HistoryPoint:
    return HistoryPoint(ts, util, memory, None, None)


def test_the_time_before_the_first_sample_is_blank_not_zero() -> None:
    points = tuple(point(ts, util=50.0) for ts in (60.0, 70.0, 80.0, 90.0))
    values = binned(points, 0.0, 100.0, 10, lambda p: p.util_pct)
    assert values[:6] == [None] * 6
    assert values[6:] == [50.0] * 4
    drawn = plot_text(values, 100.0).plain
    assert drawn[:6] == NO_SAMPLE * 6
    assert fmt.LEVELS[0] not in drawn[:6]


def test_a_zero_sample_still_draws_the_lowest_bar() -> None:
    assert plot_text([0.0], 100.0).plain == fmt.LEVELS[0]


def test_a_constant_small_memory_use_draws_a_low_line_not_a_full_bar() -> None:
    total = 80 * GIB
    points = tuple(point(ts, memory=0.8 * GIB) for ts in range(0, 100, 10))
    values = binned(points, 0.0, 100.0, 10, lambda p: p.memory_used_bytes)
    top = plot_maximum(values, total)
    assert top == total
    assert set(plot_text(values, top).plain) == {fmt.LEVELS[0]}  # ~1 %: the lowest glyph


def test_a_full_gpu_draws_full_bars_and_the_scale_never_clips() -> None:
    assert set(plot_text([80.0 * GIB] * 3, 80.0 * GIB).plain) == {fmt.LEVELS[-1]}
    assert plot_maximum([5.0, 9.0, None], None) == 9.0
    assert plot_maximum([5.0, 120.0], 100.0) == 120.0
    assert plot_maximum([None, None], None) == 1.0


def test_bins_between_regular_samples_hold_the_value_but_a_long_gap_stays_blank() -> None:
    points = tuple(point(ts, util=40.0) for ts in (0.0, 10.0, 20.0, 30.0, 80.0))
    values = binned(points, 0.0, 100.0, 20, lambda p: p.util_pct)
    assert values[:7] == [40.0] * 7  # samples every 10 s, 5 s bins: no holes
    assert values[7:16] == [None] * 9  # nothing between 30 s and 80 s
    assert values[16] == 40.0 and values[17:] == [None] * 3  # nothing after the last sample
