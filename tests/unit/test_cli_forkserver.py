"""The suite's CLI fork server gives each command what a fresh `python -m fleet.cli.main` gets."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.fixtures.cli import FleetCli, fork_server
from tests.fixtures.cli_forkserver import ForkServer


async def test_output_and_exit_codes_match_a_fresh_interpreter(fleet_cli: FleetCli) -> None:
    for args in (["--help"], ["tasks", "--state", "bogus"], ["history", "gpus", "--bucket", "7x"],
                 ["--json", "tasks", "--all"]):
        forked = await fleet_cli.run_forked(*args)
        fresh = await fleet_cli.run_exec(*args)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            fresh.returncode, fresh.stdout, fresh.stderr), args
    assert (await fleet_cli.run_forked("tasks", "--state", "bogus")).returncode == 2


async def test_each_child_gets_the_requests_environment_and_directory(
        fleet_cli: FleetCli) -> None:
    """A relative FLEET_DB lands in the request's working directory (HOME) with the modes a
    fresh interpreter gives it; a variable set for one command is gone in the next."""
    forked = await fleet_cli.run_forked("--json", "tasks", "--all",
                                        env={"FLEET_DB": "forked/fleet.db"})
    fresh = await fleet_cli.run_exec("--json", "tasks", "--all",
                                     env={"FLEET_DB": "fresh/fleet.db"})
    assert forked.returncode == fresh.returncode == 0, (forked.stderr, fresh.stderr)
    assert _modes(fleet_cli.home / "forked") == _modes(fleet_cli.home / "fresh") != {}
    assert (fleet_cli.home / "forked" / "fleet.db").exists()
    listed = await fleet_cli.run_forked("--json", "tasks", "--all")
    assert listed.returncode == 0, listed.stderr
    assert fleet_cli.db_path.exists()  # FLEET_DB back to the fixture's file


def _modes(directory: Path) -> dict[str, int]:
    return {str(path.relative_to(directory)): path.stat().st_mode
            for path in [directory, *directory.rglob("*")]}


async def test_a_command_past_its_timeout_is_killed(fleet_cli: FleetCli) -> None:
    socket_path = fleet_cli.runtime_dir() / "t.sock"
    with pytest.raises(TimeoutError):
        await fleet_cli.run_forked("serve", "--socket", str(socket_path), timeout=3)
    # The fork server has reaped the killed child.
    server_pid = fork_server().process.pid
    children = Path(f"/proc/{server_pid}/task/{server_pid}/children").read_text().split()
    assert children == []


async def test_a_child_killed_by_a_signal_reports_it_negative(fleet_cli: FleetCli) -> None:
    socket_path = fleet_cli.runtime_dir() / "s.sock"
    server = fork_server()
    task = fleet_cli.run_forked("serve", "--socket", str(socket_path), timeout=30)
    running = asyncio.ensure_future(task)
    for _ in range(200):  # bounded: ~10 s for the server socket to appear
        if socket_path.exists():
            break
        await asyncio.sleep(0.05)
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    (pid,) = (int(word) for word in children.read_text().split())
    os.kill(pid, signal.SIGKILL)
    done = await running
    assert done.returncode == -signal.SIGKILL


def test_commands_that_set_the_loaders_variables_get_a_fresh_interpreter() -> None:
    server = fork_server()
    env = dict(os.environ)
    assert server.serves({**env, "FLEET_DB": "/elsewhere.db"})
    assert not server.serves({**env, "LD_LIBRARY_PATH": "/opt/sim/lib"})
    assert not server.serves({**env, "LD_PRELOAD": "/opt/sim/lib/libfake.so"})


async def test_stopping_the_server_kills_the_commands_still_running(fleet_cli: FleetCli) -> None:
    server = ForkServer.start(dict(os.environ))
    running = asyncio.ensure_future(server.run(
        ["serve", "--socket", str(fleet_cli.runtime_dir() / "k.sock")], fleet_cli.env(),
        fleet_cli.home, timeout=60))
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    for _ in range(200):  # bounded: ~10 s for the fork
        if children.read_text().split():
            break
        await asyncio.sleep(0.05)
    (pid,) = (int(word) for word in children.read_text().split())
    await asyncio.to_thread(server.stop)
    assert not Path(f"/proc/{pid}").exists()
    with pytest.raises(RuntimeError, match="ended before its child"):
        await running


async def test_a_childs_local_time_follows_its_tz(fleet_cli: FleetCli) -> None:
    """A local --since is read in the TZ set for that command, as in a fresh interpreter."""
    args = ("--json", "history", "gpus", "--since", "2026-12-01 00:00",
            "--until", "2026-12-01 01:00")
    since = {}
    for zone in ("UTC", "Asia/Kolkata", "UTC"):
        forked = await fleet_cli.run_forked(*args, env={"TZ": zone})
        fresh = await fleet_cli.run_exec(*args, env={"TZ": zone})
        assert forked.returncode == fresh.returncode == 0, (forked.stderr, fresh.stderr)
        assert forked.json() == fresh.json(), zone
        since[zone] = forked.json()["since"]
    assert since["UTC"] - since["Asia/Kolkata"] == 5.5 * 3600
