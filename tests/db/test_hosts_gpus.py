"""Hosts and GPUs: merging sources, probe facts, GPU changes, latest readings, events."""

from __future__ import annotations

import pytest

from db.engine import Database
from db.events import add_event, list_events
from db.gpus import latest_gpus, set_gpu_drained, set_gpu_state, upsert_gpus
from db.host_reads import list_hosts
from db.hosts import sync_hosts, update_host_probe_facts, update_host_state
from db.samples import record_samples
from db.sql import SessionReader
from db.types import GpuChange, GpuFacts, GpuSampleIn, HostFacts, HostProbeFacts
from tests.db.conftest import SeededFleet


def test_sync_hosts_upserts_by_address_and_port(database: Database) -> None:
    with database.session() as session:
        first = sync_hosts(
            session,
            [
                HostFacts("a", "10.0.0.1", groups=("lab",), labels=(("rack", "r1"),)),
                HostFacts("b", "10.0.0.1", port=2222, user="ops", source="ssh_config"),
            ],
            now=100,
        )
    with database.session() as session:
        # "a" renamed at the same address keeps its id; "b" absent from this sync is kept.
        second = sync_hosts(session, [HostFacts("a-renamed", "10.0.0.1")], now=200)
        hosts = {host.name: host for host in list_hosts(SessionReader(session))}
    assert second == {"a-renamed": first["a"]}
    assert set(hosts) == {"a-renamed", "b"}
    # Listing again is not contact: last_seen stays where the insert put it.
    assert hosts["a-renamed"].first_seen == 100 and hosts["a-renamed"].last_seen == 100
    assert hosts["a-renamed"].groups == () and hosts["b"].user == "ops"
    assert hosts["b"].source == "ssh_config" and hosts["b"].state == "unknown"


def test_sync_hosts_moves_a_host_whose_address_changed(database: Database) -> None:
    with database.session() as session:
        ids = sync_hosts(session, [HostFacts("gpu1", "10.0.0.1", labels=(("k", "v"),))], now=1)
        moved = sync_hosts(session, [HostFacts("gpu1", "10.0.0.99")], now=2)
        assert moved == ids
        (host,) = list_hosts(SessionReader(session))
    assert (host.address, host.labels) == ("10.0.0.99", ())


def test_sync_hosts_renames_a_stale_holder_of_a_name(database: Database) -> None:
    with database.session() as session:
        old = sync_hosts(session, [HostFacts("x", "10.0.0.1"), HostFacts("y", "10.0.0.2")], now=1)
        # Names swap between the two addresses.
        new = sync_hosts(session, [HostFacts("y", "10.0.0.1"), HostFacts("x", "10.0.0.2")], now=2)
        names = {host.address: host.name for host in list_hosts(SessionReader(session))}
    assert new == {"y": old["x"], "x": old["y"]}
    assert names == {"10.0.0.1": "y", "10.0.0.2": "x"}


def test_sync_hosts_rejects_duplicates(database: Database) -> None:
    with pytest.raises(ValueError, match="listed twice"), database.session() as session:
        sync_hosts(session, [HostFacts("a", "h1"), HostFacts("a", "h2")], now=1)
    with pytest.raises(ValueError, match="h1:22 listed twice"), database.session() as session:
        sync_hosts(session, [HostFacts("a", "h1"), HostFacts("b", "h1")], now=1)


def test_host_state_and_probe_facts(database: Database, seeded: SeededFleet) -> None:
    alpha = seeded.host_ids["alpha"]
    with database.session() as session:
        assert (
            update_host_state(session, alpha, "unreachable", "connect timeout", now=2000)
            == "unknown"
        )
        first = update_host_probe_facts(
            session, alpha, HostProbeFacts(hostname="alpha", driver_version="550.1"), now=2001
        )
        second = update_host_probe_facts(
            session, alpha, HostProbeFacts(driver_version="560.2", cpu_count=64), now=2002
        )
        with pytest.raises(LookupError, match="no host with id 999"):
            update_host_state(session, 999, "up", None, now=1)
        host = next(h for h in list_hosts(SessionReader(session)) if h.id == alpha)
    assert first == {"hostname": (None, "alpha"), "driver_version": (None, "550.1")}
    assert second == {"driver_version": ("550.1", "560.2"), "cpu_count": (None, 64)}
    assert (host.state, host.state_reason, host.hostname, host.last_probe_at) == (
        "unreachable",
        "connect timeout",
        "alpha",
        2002,
    )


def test_upsert_gpus_reports_changes_and_missing(database: Database, seeded: SeededFleet) -> None:
    alpha = seeded.host_ids["alpha"]
    with database.session() as session:
        result = upsert_gpus(
            session,
            alpha,
            [GpuFacts(0, "GPU-swapped", "Sim H100"), GpuFacts(2, "GPU-new", "Sim H100")],
            now=3000,
        )
    assert result.ids[0] == seeded.gpu_ids[("alpha", 0)]
    assert set(result.ids) == {0, 2}
    assert result.changes == (
        GpuChange(0, "uuid", "GPU-alpha-0", "GPU-swapped"),
        GpuChange(2, "added", None, "GPU-new"),
    )
    assert result.missing == (1,)


def test_latest_gpus_returns_newest_sample_and_state(
    database: Database, seeded: SeededFleet
) -> None:
    a0, b0 = seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("beta", 0)]
    with database.sessionmaker() as session:
        record_samples(
            session,
            [],
            [
                GpuSampleIn(a0, 5_000, utilization_gpu_pct=1.0),
                GpuSampleIn(a0, 9_000, utilization_gpu_pct=99.0, memory_used_bytes=7, lost=False),
                GpuSampleIn(a0, 7_000, utilization_gpu_pct=50.0),
                GpuSampleIn(b0, 8_000, lost=True),
            ],
        )
    with database.session() as session:
        set_gpu_drained(session, b0, True, "too hot")
        assert set_gpu_state(session, b0, "lost") == "ok"
        everything = latest_gpus(session)
        only_beta = latest_gpus(session, ["beta"])
    by_key = {(gpu.host, gpu.idx): gpu for gpu in everything}
    assert [(gpu.host, gpu.idx) for gpu in everything] == [("alpha", 0), ("alpha", 1), ("beta", 0)]
    alpha0 = by_key[("alpha", 0)].latest
    assert alpha0 is not None
    assert (alpha0.ts, alpha0.utilization_gpu_pct, alpha0.memory_used_bytes) == (9_000, 99.0, 7)
    assert by_key[("alpha", 1)].latest is None
    (beta0,) = only_beta
    assert beta0.latest is not None and beta0.latest.lost
    assert (beta0.state, beta0.drained, beta0.drain_reason) == ("lost", True, "too hot")


def test_events_filter_by_time_and_severity(database: Database, seeded: SeededFleet) -> None:
    alpha = seeded.host_ids["alpha"]
    with database.session() as session:
        add_event(session, ts=10, kind="host.up", severity="info", message="up", host_id=alpha)
        add_event(
            session, ts=20, kind="gpu.hot", severity="warning", message="81 C", data={"t": 81}
        )
        add_event(session, ts=30, kind="gpu.lost", severity="critical", message="lost")
    with database.session() as session:
        all_events = list_events(session)
        serious = list_events(session, severity="warning")
        recent = list_events(session, since=20, limit=1)
    assert [event.kind for event in all_events] == ["host.up", "gpu.hot", "gpu.lost"]
    assert all_events[0].host == "alpha" and all_events[1].data == {"t": 81}
    assert [event.kind for event in serious] == ["gpu.hot", "gpu.lost"]
    assert [event.kind for event in recent] == ["gpu.lost"]


def test_a_down_host_keeps_its_last_contact_through_later_listings(
    database: Database, seeded: SeededFleet
) -> None:
    """A host reached at 1500 and down since: syncing the inventory at 1900 (as every
    `fleet status` and monitor start does) leaves last_seen at 1500."""
    host_id = seeded.host_ids["alpha"]
    with database.session() as session:
        update_host_state(session, host_id, "up", None, now=1500)
    with database.session() as session:
        update_host_state(session, host_id, "down", "unreachable", now=1700)
    with database.session() as session:
        listed = [HostFacts(host.name, host.address, port=host.port)
                  for host in list_hosts(SessionReader(session))]
    with database.writer() as writer:
        sync_hosts(writer, listed, now=1900)
    with database.session() as session:
        hosts = {host.name: host for host in list_hosts(SessionReader(session))}
    assert hosts["alpha"].state == "down" and hosts["alpha"].last_probe_at == 1700
    assert hosts["alpha"].last_seen == 1500
    assert hosts["beta"].last_seen == 1000  # never reached: when it was first listed
