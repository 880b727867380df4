"""Faults while tasks run and `fleet monitor` watches 8 namespace hosts (root only).

After each fault: the monitor still runs (or restarted cleanly), host states and events say
what happened, tasks end in their true state (the real exit code, or `lost`), no allocation is
left without a live task, and no sample the monitor reported as written is missing.
The long variants (FLEET_LONG_TESTS=1, `make reliability`) hold the faults for 30 s.
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from fleet.sim import gpus as scenarios
from tests.cluster.netns import FaultUnavailable
from tests.reliability.conftest import GPUS_PER_HOST, HOSTS
from tests.reliability.lab import (
    ReliabilityLab,
    long_tests_enabled,
    signal_all_sshd,
    wait_for,
)

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(300)]


def fault_seconds(short: float) -> float:
    return 30.0 if long_tests_enabled() else short


async def monitor_sees_all(lab: ReliabilityLab, timeout: float = 30) -> None:
    await wait_for(lambda: lab.monitor is not None and lab.monitor.summaries
                   and lab.last_summary().get("hosts_up") == HOSTS, timeout,
                   f"the monitor to see all {HOSTS} hosts up")


async def states_are(lab: ReliabilityLab, down: set[str], timeout: float) -> None:
    async def matches() -> bool:
        states = await lab.host_states()
        return {name for name, state in states.items() if state != "up"} == down
    await wait_for(matches, timeout, f"hosts {sorted(down) or 'none'} down, the rest up",
                   step=0.5)


async def assert_clean_end(lab: ReliabilityLab, expected: dict[int, tuple[str, int | None]],
                           timeout: float, lost_after: str = "5m") -> None:
    """Tasks ended as expected, the monitor lives, no allocation outlives its task."""
    tasks = await lab.wait_tasks_final(list(expected), timeout, lost_after)
    seen = {task_id: (tasks[task_id]["state"], tasks[task_id]["exit_code"])
            for task_id in expected}
    assert seen == expected
    assert lab.monitor_alive(), "the monitor exited"
    assert await asyncio.to_thread(lab.orphan_allocations) == []
    assert await asyncio.to_thread(lab.double_bookings) == []


async def test_link_down_on_a_quarter_of_hosts_then_back(lab: ReliabilityLab) -> None:
    outage = fault_seconds(4.0)
    down_hosts = lab.hosts[: HOSTS // 4]
    await lab.start_monitor()
    await monitor_sees_all(lab)
    # Tasks on the hosts about to drop outlive the outage and exit 3; one elsewhere exits 0.
    outage_tasks = [await lab.dispatch_sleeper(host.name, outage + 6, 3) for host in down_hosts]
    healthy_task = await lab.dispatch_sleeper(lab.hosts[-1].name, 1, 0)

    for host in down_hosts:
        host.link_down()
    started = time.monotonic()
    await states_are(lab, {host.name for host in down_hosts}, timeout=outage + 15)
    detected_s = time.monotonic() - started
    await asyncio.sleep(max(0.0, outage - detected_s))
    for host in down_hosts:
        host.link_up()
    await states_are(lab, set(), timeout=30)

    expected = {task_id: ("failed", 3) for task_id in outage_tasks}
    expected[healthy_task] = ("succeeded", 0)
    await assert_clean_end(lab, expected, timeout=outage + 60)
    downs = {event["host"] for event in await lab.events("host_down")}
    ups = {event["host"] for event in await lab.events("host_up")}
    assert downs == {host.name for host in down_hosts}
    assert {host.name for host in down_hosts} <= ups
    print(f"\nlink down on {len(down_hosts)}/{HOSTS} hosts for {outage:g}s: "
          f"down detected in {detected_s:.1f}s")


async def test_sshd_frozen_then_resumed(lab: ReliabilityLab) -> None:
    outage = fault_seconds(6.0)
    frozen = lab.hosts[1]
    await lab.start_monitor()
    await monitor_sees_all(lab)
    task = await lab.dispatch_sleeper(frozen.name, outage + 4, 0)

    stopped = signal_all_sshd(frozen, signal.SIGSTOP)  # listener and the monitor's session
    assert stopped
    try:
        await states_are(lab, {frozen.name}, timeout=outage + 20)
        # A fresh reconcile cannot reach the host either; the task stays running (not lost).
        tasks = await lab.tasks()
        assert tasks[task]["state"] == "running"
    finally:
        signal_all_sshd(frozen, signal.SIGCONT)
    await states_are(lab, set(), timeout=30)
    await assert_clean_end(lab, {task: ("succeeded", 0)}, timeout=outage + 60)
    assert [event["host"] for event in await lab.events("host_down")] == [frozen.name]
    await wait_for(lambda: len(lab.probe_processes(frozen)) == 1, 20,
                   "exactly one probe on the resumed host")


async def test_sshd_killed_then_restarted(lab: ReliabilityLab) -> None:
    killed = lab.hosts[2]
    await lab.start_monitor()
    await monitor_sees_all(lab)
    task = await lab.dispatch_sleeper(killed.name, 12, 5)

    started = time.monotonic()
    killed.kill_sshd()  # the listener (reaped by the cluster), then every session sshd
    signal_all_sshd(killed, signal.SIGKILL)
    assert lab.task_processes(killed), "the task must survive its sshd (it runs detached)"
    await states_are(lab, {killed.name}, timeout=20)
    detected_s = time.monotonic() - started
    await wait_for(lambda: lab.probe_processes(killed) == [], 15,
                   "the probe to exit with its session")
    print(f"\nsshd killed: down in {detected_s:.1f}s, probe gone in "
          f"{time.monotonic() - started:.1f}s")
    killed.start_sshd()
    await states_are(lab, set(), timeout=30)
    await assert_clean_end(lab, {task: ("failed", 5)}, timeout=60)
    await wait_for(lambda: len(lab.probe_processes(killed)) == 1, 20,
                   "exactly one probe after the restart")


async def test_netem_loss_and_latency(lab: ReliabilityLab) -> None:
    slow_hosts = lab.hosts[:2]
    try:
        slow_hosts[0].netem(delay_ms=200, loss_pct=30)
    except FaultUnavailable as exc:
        pytest.skip(f"netem unavailable: {exc}")
    slow_hosts[1].netem(delay_ms=200, loss_pct=30)
    await lab.start_monitor()
    task = await lab.dispatch_sleeper(slow_hosts[0].name, 3, 0)
    await asyncio.sleep(fault_seconds(10.0))
    for host in slow_hosts:
        host.clear_netem()
    await states_are(lab, set(), timeout=40)
    await assert_clean_end(lab, {task: ("succeeded", 0)}, timeout=90)


async def test_gpu_lost_mid_task(lab: ReliabilityLab) -> None:
    host = lab.hosts[3]
    await lab.start_monitor()
    await monitor_sees_all(lab)
    task = await lab.dispatch_sleeper(host.name, 5, 0, gpus=GPUS_PER_HOST)

    host.set_gpus(scenarios.gpu_lost(GPUS_PER_HOST, 1, host=host.name))
    failed = await wait_for(lambda: lab.events("gpu_failed"), 20, "a gpu_failed event")
    assert [(event["host"], event["gpu"]) for event in failed] == [(host.name, 1)]
    states = await lab.host_states()
    assert states[host.name] == "up"
    await assert_clean_end(lab, {task: ("succeeded", 0)}, timeout=60)
    # The lost GPU takes no new work; the other one does.
    placed = await lab.run("--json", "dispatch", "--dry-run", "--host", host.name, "--gpus", "2",
                           str(lab.sleeper), "1", "0")
    assert placed.returncode == 7, placed.stdout + placed.stderr


async def test_controller_sigkilled_and_restarted(lab: ReliabilityLab) -> None:
    first = await lab.start_monitor()
    await monitor_sees_all(lab)
    tasks = {await lab.dispatch_sleeper(lab.hosts[0].name, 6, 0): ("succeeded", 0),
             await lab.dispatch_sleeper(lab.hosts[5].name, 6, 4): ("failed", 4)}
    await wait_for(lambda: lab.samples_reported(first) >= HOSTS * GPUS_PER_HOST * 3, 30,
                   "flushed samples")
    code, _ = await first.finish(signal.SIGKILL)
    assert code == -signal.SIGKILL
    reported = lab.samples_reported(first)
    after_kill = await asyncio.to_thread(lab.gpu_sample_count)
    assert after_kill >= reported, "a flush the monitor reported is missing"
    # The dropped connections end every probe on the hosts: nothing is orphaned.
    await wait_for(lambda: all(lab.probe_processes(host) == [] for host in lab.hosts), 20,
                   "old probes to exit")

    second = await lab.start_monitor()
    await monitor_sees_all(lab)
    await wait_for(lambda: lab.samples_reported(second) >= HOSTS * GPUS_PER_HOST * 2, 30,
                   "samples after the restart")
    await assert_clean_end(lab, tasks, timeout=60)
    # reported before counting: a flush the running monitor reports later is not in the count
    reported_after = lab.samples_reported(second)
    total = await asyncio.to_thread(lab.gpu_sample_count)
    assert total >= after_kill + reported_after
    assert all(len(lab.probe_processes(host)) == 1 for host in lab.hosts)
    print(f"\ncontroller SIGKILL: {reported} samples reported, {after_kill} in the DB; "
          f"after restart {total}")
