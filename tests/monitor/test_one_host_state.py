"""`fleet status` and the monitor agree on a host's state: alternating them writes one event."""

from __future__ import annotations

import time
from pathlib import Path

from db.engine import Database
from db.events import list_events
from db.host_reads import list_hosts
from db.sql import SessionReader
from fleet.fanout import HostStatus, probe_host
from fleet.health.rules import HealthSettings, HealthTracker
from fleet.model import HostSpec
from fleet.monitor.batch import HostOutcomeIn
from fleet.monitor.config import Settings
from fleet.monitor.monitor import Monitor
from fleet.monitor.summary import MonitorSummary
from fleet.monitor.writer import SampleWriter
from fleet.recorder import record_statuses
from fleet.reports import HostReport, ProbeReport
from fleet.ssh.options import SshOptions
from tests.monitor.conftest import wait_until

DEAD = HostSpec("dead", "127.0.0.1", port=1)  # nothing listens: connection refused
ROUNDS = 3


def _options(tmp_path: Path) -> SshOptions:
    return SshOptions(connect_timeout=2.0, login_timeout=2.0, known_hosts_files=(),
                      pinned_hosts_file=tmp_path / "pinned", ssh_config_files=())


def _up(spec: HostSpec) -> HostStatus:
    report = ProbeReport(schema=1, timestamp=time.time(), host=HostReport(hostname=spec.name))
    return HostStatus(spec, "up", None, report, 0.1, time.time())


def _stored(database: Database, name: str) -> tuple[str, str | None]:
    with database.session() as session:
        (host,) = [host for host in list_hosts(SessionReader(session)) if host.name == name]
    return host.state, host.state_reason


def _host_events(database: Database) -> list[tuple[str, str]]:
    with database.session() as session:
        return [(e.kind, e.severity) for e in list_events(session, limit=None)
                if e.kind.startswith("host_")]


async def _run_monitor(database: Database, options: SshOptions, settings: Settings) -> Monitor:
    """`fleet monitor` as a fresh process: its real stream is refused every interval, for more
    than host_down_after intervals in a row; returns it stopped (everything flushed)."""
    ticks: list[MonitorSummary] = []
    monitor = Monitor([DEAD], database, options, settings, on_summary=ticks.append)
    await monitor.start()
    try:
        down_after = settings.health.host_down_after
        await wait_until(lambda: len(ticks) > down_after + 1, 10, "monitor intervals")
    finally:
        await monitor.stop()
    return monitor


async def test_dead_host_alternating_status_and_monitor_is_down_once(
    database: Database, fast_settings: Settings, tmp_path: Path
) -> None:
    options = _options(tmp_path)
    with database.session() as session:
        record_statuses(session, [_up(DEAD)])  # it was up once
    states = []
    for _ in range(ROUNDS):
        # `fleet status`: one real probe, refused, recorded.
        status = await probe_host(DEAD, options, timeout=2.0)
        assert status.state == "unreachable"
        with database.session() as session:
            record_statuses(session, [status])
        states.append(_stored(database, "dead"))
        monitor = await _run_monitor(database, options, fast_settings)
        snapshot = monitor.snapshot()
        assert snapshot is not None and snapshot.hosts[0].state == "down"
        states.append(_stored(database, "dead"))
    assert set(states) == {("down", "unreachable: connection refused at 127.0.0.1:1")}, states
    assert _host_events(database) == [("host_down", "error")]


async def test_host_coming_back_alternating_status_and_monitor_is_up_once(
    database: Database, tmp_path: Path
) -> None:
    # The monitor's path without SSH: its tracker counts, its writer records against the database.
    settings = HealthSettings(host_down_after=3)
    tracker = HealthTracker(settings)
    writer = SampleWriter(database, 1000, host_down_after=settings.host_down_after)
    await writer.register_hosts([DEAD])

    async def monitor_sees(ok: bool, times: int = 1) -> None:
        for _ in range(times):
            now = time.time()
            if ok:
                tracker.observe("dead", "up", None, _up(DEAD).report, now)
                writer.add_host_outcome(HostOutcomeIn("dead", "up", None, 0, now))
            else:
                tracker.observe("dead", "unreachable", "connection refused", None, now)
                writer.add_host_outcome(HostOutcomeIn("dead", "unreachable", "connection refused",
                                                      tracker.failures("dead"), now))
        await writer.flush()
        for name, state in writer.take_stored_states().items():
            tracker.sync_host_state(name, state)

    await monitor_sees(ok=True)
    await monitor_sees(ok=False, times=3)
    assert _stored(database, "dead")[0] == "down"
    # The host answers `fleet status` first; the monitor, which last saw it down, agrees after.
    states = []
    for _ in range(ROUNDS):
        with database.session() as session:
            record_statuses(session, [_up(DEAD)])
        states.append(_stored(database, "dead"))
        await monitor_sees(ok=True)
        states.append(_stored(database, "dead"))
    assert set(states) == {("up", None)}, states
    assert tracker.host_state("dead") == "up"
    assert _host_events(database) == [("host_down", "error"), ("host_up", "info")]
