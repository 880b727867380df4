"""Samples wait for the flush interval; what others act on is written at once: a host's first
reading (its GPUs), its state changes and their events, any event or health change."""

from __future__ import annotations

from sqlalchemy import func, select

from db.engine import Database
from db.models import Event, Gpu, GpuSample, Host
from fleet.health.changes import HealthChange
from fleet.monitor.batch import EventIn
from fleet.monitor.config import Settings
from fleet.monitor.monitor import Monitor
from fleet.monitor.writer import SampleWriter
from fleet.sim import gpus as sim
from fleet.ssh.options import SshOptions
from tests.monitor.conftest import GpuHostFactory, relayed, wait_until

LONG_FLUSH_S = 60.0  # far beyond every wait below: only a due write can land in time
PROMPT_S = 15.0


def _stored(database: Database) -> tuple[str | None, int, int, list[str]]:
    """The host's stored state, its GPU rows, its GPU sample rows and the host events."""
    with database.session() as session:
        state = session.scalar(select(Host.state).where(Host.name == "flaky"))
        gpus = session.scalar(select(func.count(Gpu.id))) or 0
        samples = session.scalar(select(func.count(GpuSample.id))) or 0
        kinds = [kind for kind in session.scalars(select(Event.kind).order_by(Event.id))
                 if kind.startswith("host_")]
    return state, gpus, samples, kinds


async def test_samples_wait_for_the_flush_and_state_changes_do_not(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    fast_settings: Settings, monitors: list[Monitor],
) -> None:
    relay, spec = await relayed(await gpu_hosts("flaky", sim.idle(2, host="flaky")),
                                sim_ssh_options)
    settings = fast_settings.with_values("monitor", flush_interval=LONG_FLUSH_S)
    monitor = Monitor([spec], database, sim_ssh_options, settings)
    monitors.append(monitor)
    await monitor.start()
    try:
        stats = monitor.stream_stats()["flaky"]
        # The first reading is written at once: its GPUs can be claimed right away.
        await wait_until(lambda: _stored(database)[1] == 2, PROMPT_S, "the GPUs' rows")
        written = _stored(database)[2]
        readings = stats.reports
        await wait_until(lambda: stats.reports >= readings + 5, PROMPT_S, "5 more readings")
        assert _stored(database)[2] == written, "steady readings were written before the flush"

        await relay.stop()
        await wait_until(lambda: _stored(database)[0] == "down", PROMPT_S, "host_down stored")
        assert _stored(database)[3] == ["host_down"]
        await relay.start()
        await wait_until(lambda: _stored(database)[0] == "up", PROMPT_S, "host_up stored")
        assert _stored(database)[3] == ["host_down", "host_up"]
        readings, written = stats.reports, _stored(database)[2]
        await wait_until(lambda: stats.reports >= readings + 3, PROMPT_S, "3 more readings")
        assert monitor.writer.buffered_rows > 0 and _stored(database)[2] == written
        await monitor.stop()  # a stop writes what is buffered
    finally:
        await relay.stop()
    assert _stored(database)[2] > written


async def test_events_and_health_changes_make_the_writer_due(database: Database) -> None:
    writer = SampleWriter(database, flush_rows=5000)
    writer.add_health_changes([], 0.0)
    assert not writer.due.is_set()  # nothing to act on
    writer.add_event(EventIn(ts=1.0, kind="gpu_unmanaged_use", severity="warning",
                             message="pid 7 on h:0", host="h", gpu_index=0, data={}))
    assert writer.due.is_set()
    writer.due.clear()
    change = HealthChange(host="h", gpu_index=0, kind="gpu_hot", severity="warning",
                          old_state="ok", new_state="hot", message="h:0 is hot")
    writer.add_health_changes([change], 1.0)
    assert writer.due.is_set()
