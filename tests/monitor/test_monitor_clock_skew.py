"""Hosts whose clocks are off the controller's, monitored over real SSH with the real probe:
their samples land at controller time, in the rollups and bucketed history too."""

from __future__ import annotations

import stat
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from db.engine import Database
from db.events import list_events
from db.models import Gpu, GpuSample, GpuSampleMinute, Host, HostSample
from db.rollup_history import gpu_history_with_rollups
from db.types import EventRow
from fleet.fanout import HostStatus
from fleet.health.retention import RetentionSettings, apply_retention
from fleet.model import HostSpec
from fleet.monitor.config import Settings
from fleet.monitor.monitor import Monitor
from fleet.probe.parse import report_from_dict
from fleet.recorder import record_statuses
from fleet.sim import gpus as sim
from fleet.ssh.options import SshOptions
from tests.monitor.conftest import GpuHostFactory, wait_until

# The host's python3 with its clock moved by the seconds written in OFFSET_FILE (read at each
# time.time(), so a test can step it): it runs the probe's `-c BOOTSTRAP` as python3 would.
SKEWED_PYTHON = """#!/bin/sh
exec python3 -S -c '
import sys, time
_real = time.time
def _skewed():
    with open("{offset_file}") as offset:
        return _real() + float(offset.read())
time.time = _skewed
code = sys.argv[sys.argv.index("-c", 1) + 1]
sys.argv = ["-c"]
exec(compile(code, "<probe>", "exec"), {{"__name__": "__main__"}})
' "$@"
"""


def _skewed_python(home: Path, offset: float) -> tuple[str, Path]:
    """A python for the host whose clock is `offset` s off (negative: behind); its path and
    the file that sets the offset."""
    offset_file = home / "clock-offset"
    offset_file.write_text(repr(offset))
    path = home / "skewed-python"
    path.write_text(SKEWED_PYTHON.format(offset_file=offset_file))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path), offset_file


def _roll_up_a_minute_before(database: Database, now: float) -> None:
    """A GPU's sample 3 minutes ago and a retention pass now: the rollups' watermark is then
    2-3 minutes ago, as on a controller that has run a while."""
    line = {"schema": 1, "ts": now - 180, "host": {}, "gpus": [{"index": 0, "uuid": "GPU-old"}]}
    status = HostStatus(HostSpec("old", "10.9.9.9"), "up", None, report_from_dict(line, "old"),
                        0.1, now - 180)
    with database.session() as session:
        record_statuses(session, [status], now=now - 180)
    with database.session() as session:
        apply_retention(session, RetentionSettings(), now)


def _counts(rows: Iterable[Any]) -> dict[str, int]:
    return {name: int(count) for name, count in rows}


def _clock_events(database: Database) -> list[EventRow]:
    with database.session() as session:
        return [event for event in list_events(session, limit=None) if event.kind == "clock_skew"]


def _offset(event: EventRow) -> float:
    offset = event.data["offset_s"]
    assert isinstance(offset, float)
    return offset


def _stored_times(database: Database, host: str) -> tuple[list[int], list[int]]:
    """The host's GPU sample times (GPU 0's, in insertion order) and host sample times."""
    with database.session() as session:
        gpu = session.scalars(
            select(GpuSample.ts).join(Gpu, Gpu.id == GpuSample.gpu_id)
            .join(Host, Host.id == Gpu.host_id)
            .where(Host.name == host, Gpu.idx == 0).order_by(GpuSample.id)).all()
        hosts = session.scalars(
            select(HostSample.ts).join(Host, Host.id == HostSample.host_id)
            .where(Host.name == host).order_by(HostSample.id)).all()
    return list(gpu), list(hosts)


async def test_skewed_hosts_samples_land_at_controller_time_and_are_rolled_up(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    fast_settings: Settings, monitors: list[Monitor],
) -> None:
    offsets = {"behind": -300.0, "ahead": 300.0, "instep": 0.0}
    specs = []
    for name, offset in offsets.items():
        host = await gpu_hosts(name, sim.idle(2, host=name))
        python, _ = _skewed_python(host.host.home, offset)
        specs.append(replace(host.spec, python=python))
    started = time.time()
    _roll_up_a_minute_before(database, started)
    monitor = Monitor(specs, database, sim_ssh_options, fast_settings)
    monitors.append(monitor)
    await monitor.start()
    stats = monitor.stream_stats()
    await wait_until(lambda: all(stats[name].reports >= 8 for name in offsets), 30,
                     "8 readings from every host")
    snapshot = monitor.snapshot()
    assert snapshot is not None
    for seen in snapshot.hosts:  # the live view is on the controller's clock too
        assert seen.report is not None and abs(seen.report.timestamp - time.time()) < 5
    await monitor.stop()
    stopped = time.time()

    for name in offsets:
        gpu_ts, host_ts = _stored_times(database, name)
        assert len(gpu_ts) >= 8 and len(host_ts) >= 8
        for ts in gpu_ts + host_ts:
            assert started - 1 <= ts / 1000 <= stopped + 1, (name, ts / 1000 - started)
        assert gpu_ts == sorted(gpu_ts)  # each host's readings in their order

    # Later retention passes close every minute the samples are in: all are rolled up, and a
    # bucketed history (read from the rollups) has them all.
    with database.session() as session:
        apply_retention(session, RetentionSettings(), stopped + 600)
    with database.session() as session:
        raw = _counts(session.execute(
            select(Host.name, func.count(GpuSample.gpu_id))
            .join(Gpu, Gpu.id == GpuSample.gpu_id).join(Host, Host.id == Gpu.host_id)
            .group_by(Host.name)))
        rolled = _counts(session.execute(
            select(Host.name, func.sum(GpuSampleMinute.samples))
            .join(Gpu, Gpu.id == GpuSampleMinute.gpu_id).join(Host, Host.id == Gpu.host_id)
            .group_by(Host.name)))
    with database.reader() as reader:
        for name in offsets:
            points = gpu_history_with_rollups(
                reader, since_ms=int((started - 900) * 1000), until_ms=int((stopped + 900) * 1000),
                host=name, bucket_s=60)
            assert rolled.get(name) == raw[name], (name, rolled, raw)
            assert sum(point.samples for point in points) == raw[name], name

    events = _clock_events(database)
    assert sorted((e.host, e.severity) for e in events) == [
        ("ahead", "warning"), ("behind", "warning")], events
    for event in events:
        assert event.host is not None
        assert abs(_offset(event) + offsets[event.host]) < 5, event
        assert event.host in event.message and "300" in event.message


async def test_a_host_clock_put_right_is_reported_and_its_samples_stay_in_order(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    fast_settings: Settings, monitors: list[Monitor],
) -> None:
    host = await gpu_hosts("drifty", sim.idle(1, host="drifty"))
    python, offset_file = _skewed_python(host.host.home, -120.0)
    started = time.time()
    monitor = Monitor([replace(host.spec, python=python)], database, sim_ssh_options,
                      fast_settings)
    monitors.append(monitor)
    await monitor.start()
    stats = monitor.stream_stats()["drifty"]
    await wait_until(lambda: stats.reports >= 5, 20, "readings with the clock behind")
    offset_file.write_text("0.0")  # NTP steps the clock: in step from its next reading on
    await wait_until(lambda: len(_clock_events(database)) == 2, 20, "the recovery event")
    reports = stats.reports
    await wait_until(lambda: stats.reports >= reports + 5, 20, "readings in step")
    await monitor.stop()
    stopped = time.time()

    skewed, recovered = _clock_events(database)
    assert (skewed.severity, skewed.data["skewed"]) == ("warning", True)
    assert 118 < _offset(skewed) < 125 and "120" in skewed.message
    assert (recovered.severity, recovered.data["skewed"]) == ("info", False)
    assert abs(_offset(recovered)) < 2
    gpu_ts, host_ts = _stored_times(database, "drifty")
    assert gpu_ts == sorted(gpu_ts) and len(set(gpu_ts)) == len(gpu_ts)
    assert all(started - 1 <= ts / 1000 <= stopped + 1 for ts in gpu_ts + host_ts)
