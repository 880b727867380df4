"""A host's clock offset (fleet.monitor.clock), the stream stamping readings with it, the pid
line of a restarted probe, and `fleet status` recording a skewed host's reading."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select

from db.engine import Database
from db.models import GpuSample, HostSample
from fleet.fanout import HostStatus
from fleet.model import HostOutcome, HostSpec
from fleet.monitor import probe_session
from fleet.monitor.clock import (
    CLOCK_SKEW_RECOVERED_S,
    CLOCK_SKEW_TOLERANCE_S,
    WINDOW_LINES,
    WINDOW_S,
    ClockOffset,
    one_shot_time,
)
from fleet.monitor.config import default_settings
from fleet.monitor.lines import OverlongLine
from fleet.monitor.stream import HostStream
from fleet.probe.parse import report_from_dict
from fleet.recorder import record_statuses
from fleet.reports import ProbeReport

T0 = 1_700_000_000.0
SPEC = HostSpec("skewed", "10.9.0.7")


def _feed(clock: ClockOffset, offset: float, delays: list[float], start: float,
          interval: float = 1.0) -> list[bool]:
    """One line per interval from a host whose clock is `offset` s behind (negative: ahead),
    each arriving after its delay; what observe() returned for each."""
    changes = []
    for n, delay in enumerate(delays):
        taken = start + n * interval  # on the controller's clock
        changes.append(clock.observe(taken - offset, taken + delay))
    return changes


def test_offset_is_the_least_delayed_line_and_in_step_hosts_are_left_alone() -> None:
    rng = random.Random(3)
    clock = ClockOffset()
    delays = [0.002 + rng.expovariate(1 / 0.05) for _ in range(200)]
    delays[10:14] = [4.0, 3.0, 2.0, 1.0]  # the controller's loop held up, then a burst
    assert not any(_feed(clock, 0.0, delays, T0))
    assert not clock.skewed and clock.correction == 0.0
    assert 0.0 <= clock.estimate < 0.2


@pytest.mark.parametrize("offset", [300.0, -300.0, 6.0, -7.5])
def test_skew_beyond_the_tolerance_is_reported_once_and_corrected(offset: float) -> None:
    rng = random.Random(5)
    clock = ClockOffset()
    delays = [1.5, *(0.01 + rng.random() * 0.3 for _ in range(100))]  # a slow first line
    changes = _feed(clock, offset, delays, T0)
    assert changes[0] and changes.count(True) == 1  # skewed from the first line on
    assert clock.skewed
    # The slow first line's 1.5 s was left out once quicker lines came (a step of > 1 s).
    assert offset + 0.01 <= clock.correction <= offset + 0.31


def test_skew_within_the_tolerance_is_left_alone() -> None:
    clock = ClockOffset()
    assert not any(_feed(clock, CLOCK_SKEW_TOLERANCE_S - 0.5, [0.05] * 50, T0))
    assert clock.correction == 0.0


def test_correction_stays_constant_while_the_delays_jitter() -> None:
    """Readings of one host keep their exact spacing: the correction moves only by steps."""
    rng = random.Random(11)
    clock = ClockOffset()
    corrections = set()
    for n in range(300):
        clock.observe(T0 + n - 120.0, T0 + n + rng.uniform(0.0, 0.8))
        corrections.add(clock.correction)
    assert len(corrections) == 1 and 120.0 <= corrections.pop() <= 120.8


def test_recovery_is_reported_once_with_hysteresis() -> None:
    clock = ClockOffset()
    assert _feed(clock, 300.0, [0.05] * 10, T0).count(True) == 1
    # NTP steps the host's clock forward: in step at its next line.
    changes = _feed(clock, 0.0, [0.05] * 10, T0 + 10)
    assert changes[0] and changes.count(True) == 1
    assert not clock.skewed and clock.correction == 0.0
    # Hovering around the tolerance after a skew: no flapping.
    clock = ClockOffset()
    start = T0
    changes = []
    for offset in [CLOCK_SKEW_TOLERANCE_S + 0.5, CLOCK_SKEW_RECOVERED_S + 0.5] * 20:
        changes += _feed(clock, offset, [0.05] * (2 * WINDOW_LINES), start, interval=WINDOW_S)
        start += 2 * WINDOW_LINES * WINDOW_S
    assert changes.count(True) == 1 and clock.skewed


def test_a_clock_stepped_back_is_followed_within_two_windows() -> None:
    clock = ClockOffset()
    _feed(clock, -300.0, [0.05] * 40, T0)  # ahead by 5 minutes
    assert clock.skewed and clock.correction == pytest.approx(-299.95)
    lines = int(2 * WINDOW_S) + 2 * WINDOW_LINES  # one a second
    changes = _feed(clock, 0.0, [0.05] * lines, T0 + 40)
    assert changes.count(True) == 1 and not clock.skewed


def test_one_shot_time_is_the_arrival_only_beyond_the_tolerance() -> None:
    assert one_shot_time(T0 - 1.0, T0) == T0 - 1.0
    assert one_shot_time(T0 - 300.0, T0) == T0
    assert one_shot_time(T0 + 300.0, T0) == T0


# ---- the stream, without SSH: lines handed to _take_line as the probe session does ----


class _Sink:
    def __init__(self) -> None:
        self.reports: list[ProbeReport] = []
        self.skews: list[tuple[float, bool]] = []

    def on_report(self, spec: HostSpec, report: ProbeReport) -> None:
        self.reports.append(report)

    def on_failure(self, spec: HostSpec, outcome: HostOutcome, reason: str) -> None:
        raise AssertionError(f"{outcome}: {reason}")

    def on_clock_skew(self, spec: HostSpec, offset: float, skewed: bool) -> None:
        self.skews.append((offset, skewed))


def _line(ts: float) -> bytes:
    return json.dumps({"schema": 1, "ts": ts, "host": {"hostname": "skewed"},
                       "gpus": [{"index": 0, "uuid": "GPU-0"}]}).encode()


def _stream(sink: _Sink) -> HostStream:
    pool: Any = SimpleNamespace(options=SimpleNamespace(command_timeout=5.0),
                                connection=lambda name: None)
    return HostStream(SPEC, pool, default_settings().monitor, sink, program=lambda: b"")


async def test_stream_stamps_a_skewed_hosts_readings_on_the_controllers_clock() -> None:
    sink = _Sink()
    stream = _stream(sink)
    first = time.time() - 300.0  # the host's clock is 5 minutes behind
    for n in range(5):
        stream._take_line(_line(first + n * 0.01))
    stamps = [report.timestamp for report in sink.reports]
    assert all(abs(stamp - time.time()) < 2.0 for stamp in stamps), stamps
    # the spacing of the host's own times is kept exactly
    assert [round(b - a, 6) for a, b in pairwise(stamps)] == [0.01] * 4
    assert len(sink.skews) == 1 and sink.skews[0][1] and 299.0 < sink.skews[0][0] < 302.0


async def test_stream_keeps_an_in_step_hosts_own_times() -> None:
    sink = _Sink()
    stream = _stream(sink)
    stamps = [time.time() - 1.0, time.time() - 0.5]
    for stamp in stamps:
        stream._take_line(_line(stamp))
    assert [report.timestamp for report in sink.reports] == stamps and not sink.skews


# ---- a restarted probe's pid line arriving before its session is returned ----


class _Channel:
    def __init__(self, stream: HostStream) -> None:
        self.stream = stream
        self.pid_at_start: int | None = None

    def write(self, data: bytes) -> None:
        self.pid_at_start = self.stream._remote_pid

    def write_eof(self) -> None:
        pass

    def close(self) -> None:
        pass

    def get_exit_status(self) -> int:
        return 0


async def test_pid_line_arriving_before_the_session_returns_is_the_new_probes_pid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = _Sink()
    stream = _stream(sink)
    stream._remote_pid = 111  # the previous probe's, as a reconnect finds it
    channels: list[_Channel] = []

    async def open_early(conn: Any, command: str,
                         on_line: Callable[[bytes | OverlongLine], None],
                         limit: int) -> tuple[Any, Any]:
        on_line(b"fleet-probe-pid 222")  # in the packet callback, before create_session returns
        await asyncio.sleep(0)
        ended = asyncio.get_running_loop().create_future()
        ended.set_result(None)
        channels.append(_Channel(stream))
        return channels[-1], SimpleNamespace(ended=ended, partial=b"", stderr_tail=bytearray())

    monkeypatch.setattr(probe_session, "open_probe_session", open_early)
    stream._stopping.set()  # the session ends as after stop(): cleanly, nothing to kill
    conn: Any = SimpleNamespace(is_closed=lambda: False)
    await stream._stream(conn)
    assert stream.stats.garbage_lines == 0
    assert channels[0].pid_at_start == 222 and stream._remote_pid == 222


# ---- `fleet status`: one reading, corrected by the time its reply arrived ----


def _status(name: str, address: str, host_ts: float, arrived: float) -> HostStatus:
    line = {"schema": 1, "ts": host_ts, "host": {"hostname": name},
            "gpus": [{"index": 0, "uuid": f"GPU-{name}", "utilization_gpu_pct": 50.0}]}
    return HostStatus(HostSpec(name, address), "up", None,
                      report_from_dict(line, name), 0.2, arrived)


def test_fleet_status_stores_a_skewed_hosts_reading_at_its_arrival(tmp_path: Path) -> None:
    from db.engine import open_database

    database: Database = open_database(f"sqlite:///{tmp_path / 'fleet.db'}")
    try:
        with database.session() as session:
            record_statuses(session, [
                _status("behind", "10.9.0.1", T0 - 300.0, T0),
                _status("ahead", "10.9.0.2", T0 + 600.0, T0 + 0.5),
                _status("instep", "10.9.0.3", T0 - 0.7, T0),
            ], now=T0)
        with database.session() as session:
            gpu_ts = sorted(session.scalars(select(GpuSample.ts)))
            host_ts = sorted(session.scalars(select(HostSample.ts)))
    finally:
        database.close()
    expected = sorted([int(T0 * 1000), int((T0 + 0.5) * 1000), int((T0 - 0.7) * 1000)])
    assert gpu_ts == expected and host_ts == expected
