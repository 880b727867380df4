"""Teardown of a recorded run, and removal of runs whose owner died (SIGKILLed tests, crashes)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from tests.cluster import netns
from tests.cluster.state import RecordedProcess, RunState, recorded_runs, state_lock

PROCESS_EXIT_TIMEOUT_S = 10.0
ANNOUNCER_GOODBYE_TIMEOUT_S = 2.0
ORPHAN_NAMESPACE = re.compile(r"^fc-([0-9a-f]{6})-\d+$")
ORPHAN_LINK = re.compile(r"^fc([0-9a-f]{6})(?:br|v\d+)$")


def signal_recorded(process: RecordedProcess, signum: int) -> bool:
    """Signals a recorded process only if it is still the same process (PID and start time)."""
    if not process.is_alive():
        return False
    try:
        os.kill(process.pid, signum)
    except ProcessLookupError:
        return False
    return True


def still_running(processes: Iterable[RecordedProcess], timeout_s: float) -> list[RecordedProcess]:
    """Waits up to timeout_s for these to exit; returns those still running (zombies count as gone,
    as PID 1 reaps lazily here)."""
    pending = list(processes)
    deadline = time.monotonic() + timeout_s
    while pending:
        pending = [process for process in pending if process.is_alive()]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return pending


def wait_gone(
    processes: Iterable[RecordedProcess], timeout_s: float = PROCESS_EXIT_TIMEOUT_S
) -> None:
    pending = still_running(processes, timeout_s)
    if pending:
        roles = ", ".join(f"{p.role} (pid {p.pid})" for p in pending)
        raise RuntimeError(f"test-cluster teardown: still running after {timeout_s} s: {roles}")


def teardown_run(state: RunState) -> None:
    """Removes everything the run recorded; safe to repeat and safe on a half-built run."""
    # Announcers get SIGTERM first, so browsers see their goodbye rather than stale records.
    announcers = [p for p in state.processes if p.role.startswith("announcer:")]
    for process in announcers:
        signal_recorded(process, signal.SIGTERM)
    still_running(announcers, ANNOUNCER_GOODBYE_TIMEOUT_S)
    for process in state.processes:
        signal_recorded(process, signal.SIGKILL)
    if state.mode == "netns":
        netns.destroy_network(state.bridge, state.namespaces, state.veths)
    wait_gone(state.processes)
    run_dir = Path(state.run_dir)
    if run_dir.is_dir():
        shutil.rmtree(run_dir)
    state.forget()


def cleanup_stale_runs() -> list[str]:
    """Tears down runs whose owning process is gone; returns their run ids. Caller holds no lock."""
    with state_lock():
        return _cleanup_runs_locked(lambda state: state.is_stale())


def cleanup_runs(*, include_live: bool, run_ids: Iterable[str] | None = None) -> list[str]:
    """`down`: removes detached and stale runs (only `run_ids` if given), live-owned if asked."""
    wanted = set(run_ids) if run_ids else None

    def should_remove(state: RunState) -> bool:
        if wanted is not None and state.run_id not in wanted:
            return False
        return include_live or state.owner is None or state.is_stale()

    with state_lock():
        return _cleanup_runs_locked(should_remove)


def sweep_orphans() -> list[str]:
    """Removes namespaces and links named like this tool's whose run has no state file at all.

    Safe against concurrent runs: a run saves its state file (under the lock held here) before it
    creates anything, so a part without a state file belongs to no live run.
    """
    with state_lock():
        known_runs = {state.run_id for state in recorded_runs()}
        namespaces = [
            name
            for name in netns.list_namespaces()
            if (match := ORPHAN_NAMESPACE.match(name)) and match.group(1) not in known_runs
        ]
        links = [
            name
            for name in netns.list_links()
            if (match := ORPHAN_LINK.match(name)) and match.group(1) not in known_runs
        ]
        veths = [name for name in links if not name.endswith("br")]
        netns.destroy_network(None, namespaces, veths)
        for bridge in (name for name in links if name.endswith("br")):
            netns.destroy_network(bridge, [], [])
        return namespaces + links


def _cleanup_runs_locked(should_remove: Callable[[RunState], bool]) -> list[str]:
    removed = []
    for state in recorded_runs():
        if should_remove(state):
            teardown_run(state)
            removed.append(state.run_id)
    return removed
