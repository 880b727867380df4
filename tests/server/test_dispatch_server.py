"""`fleet dispatch`, `logs` and `cancel` through a real `fleet serve`: the server places, uploads,
starts, streams and records; the client's Ctrl-C, a vanished client and a vanished server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from db.rows import TaskRow
from tests.dispatch.conftest import wait_group_gone
from tests.dispatch.test_dispatch_cli import GATED, SLEEPER
from tests.server.conftest import ServeLab, ServeLabFactory

ECHO = """\
import json, os, pathlib, sys
print(json.dumps({"argv": sys.argv[1:], "cuda": os.environ["CUDA_VISIBLE_DEVICES"],
                  "task": os.environ["FLEET_TASK_ID"], "color": os.environ.get("COLOR"),
                  "data": pathlib.Path("data/nested/x.txt").read_text()}))
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""


def _script(lab: ServeLab, name: str, source: str) -> Path:
    path = lab.cli.home / name
    path.write_text(source)
    return path


async def _spawn(lab: ServeLab, *args: str, env: dict[str, str] | None = None
                 ) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet.cli.main", *args, cwd=lab.cli.home,
        env=lab.cli.env(lab.env(env)), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def _tasks(lab: ServeLab) -> list[dict[str, Any]]:
    result = await lab.run("--json", "tasks", "--all")
    assert result.returncode == 0, result.stderr
    return list(result.json()["tasks"])


async def _wait_state(lab: ServeLab, task_id: int, states: set[str],
                      deadline_s: float = 20.0) -> dict[str, Any]:
    """The task once it is in one of `states` (polled through the server, bounded)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        recorded = next(task for task in await lab.cli.recorded_tasks() if task.id == task_id)
        if recorded.state in states:
            break
        await asyncio.sleep(0.2)
    return next(t for t in await _tasks(lab) if t["id"] == task_id)


async def test_dispatch_runs_through_the_server_as_the_caller(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(2)
    server = await lab.serve()
    script = _script(lab, "echo.py", ECHO)
    (lab.cli.home / "data" / "nested").mkdir(parents=True)
    (lab.cli.home / "data" / "nested" / "x.txt").write_text("payload")
    result = await lab.run("dispatch", "--gpus", "2", "--with", "data", "--env", "COLOR=red",
                           "--env", "EXIT_WITH=3", "--explain", str(script), "a b", "--flag",
                           env={"FLEET_OWNER": "mallory"})
    assert result.returncode == 3, result.stderr
    report = json.loads(result.stdout)
    assert report["argv"] == ["a b", "--flag"] and report["color"] == "red"
    assert report["data"] == "payload" and len(report["cuda"].split(",")) == 2
    assert "started on gpu1 GPU 0,1" in result.stderr
    assert "Eligible GPUs, best first" in result.stderr  # --explain, rendered by the server
    (task,) = await _tasks(lab)
    assert task["id"] == int(report["task"]) and task["state"] == "failed"
    assert task["exit_code"] == 3 and task["owner"] != "mallory"
    assert task["script"] == str(script)  # the client's path, not the server's staging copy
    async with lab.remote(server) as remote:
        assert task["owner"] == (await remote.whoami()).user
    assert json.loads((await lab.run("--json", "allocations")).stdout)["allocations"] == []
    # The server's staged copy is gone once the host has the files.
    staged = lab.cli.home / ".local" / "state" / "fleet" / "serve" / "staged"
    assert staged.is_dir() and not list(staged.iterdir())


async def test_detach_then_logs_follow_through_the_server(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    await lab.serve()
    script = _script(lab, "sleep.py", SLEEPER)
    detached = await lab.run("--json", "dispatch", "--detach", str(script), "1", "4")
    assert detached.returncode == 0, detached.stderr
    task_id = detached.json()["task_id"]
    followed = await lab.run("logs", "-f", str(task_id))
    assert followed.returncode == 4, followed.stderr
    assert followed.stdout.splitlines()[-1] == "done"
    again = await lab.run("logs", str(task_id))
    assert again.returncode == 0 and again.stdout == followed.stdout
    assert (await _wait_state(lab, task_id, {"failed"}))["exit_code"] == 4
    # Nobody follows this one: the server does, so `fleet tasks` shows its end promptly
    # (through the server it no longer checks the hosts itself; the reconciler takes 30 s).
    unwatched = await lab.run("--json", "dispatch", "--detach", str(script), "0.5", "3")
    assert unwatched.returncode == 0, unwatched.stderr
    row = await _wait_state(lab, unwatched.json()["task_id"], {"failed"}, deadline_s=10.0)
    assert (row["state"], row["exit_code"]) == ("failed", 3)


async def test_dry_run_and_no_placement_through_the_server(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(2)
    await lab.serve()
    script = _script(lab, "sleep.py", SLEEPER)
    dry = await lab.run("--json", "dispatch", "--dry-run", "--gpus", "2", str(script))
    assert dry.returncode == 0, dry.stderr
    assert dry.json()["placed"] is True and dry.json()["host"] == "gpu1"
    nothing = await lab.run("dispatch", "--gpus", "3", "--explain", str(script), "0")
    assert nothing.returncode == 7, nothing.stderr
    assert "gpu1" in nothing.stderr
    (task,) = await _tasks(lab)
    assert task["state"] == "failed" and "no placement" in task["error"]


@pytest.mark.slow
async def test_ctrl_c_through_the_server_cancels_the_task(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    await lab.serve()
    script = _script(lab, "sleep.py", SLEEPER)
    process = await _spawn(lab, "dispatch", "--grace", "2s", str(script), "60")
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    _, _pid, pgid = line.decode().split()
    process.send_signal(signal.SIGINT)
    await asyncio.wait_for(process.wait(), 20)
    assert process.returncode == 130
    assert await asyncio.to_thread(wait_group_gone, int(pgid), 5.0)
    (task,) = await _tasks(lab)
    assert task["state"] == "cancelled"
    assert json.loads((await lab.run("--json", "allocations")).stdout)["allocations"] == []


@pytest.mark.slow
async def test_ctrl_c_while_queued_cancels_the_queued_task(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    await lab.serve()
    held = await lab.run("--json", "reserve", "--gpus", "1")
    assert held.returncode == 0, held.stderr
    script = _script(lab, "sleep.py", SLEEPER)
    process = await _spawn(lab, "dispatch", "--wait", str(script), "0")
    assert process.stderr is not None
    deadline = time.monotonic() + 20
    queued: list[TaskRow] = []
    while not queued and time.monotonic() < deadline:
        queued = [t for t in await lab.cli.recorded_tasks() if t.state == "queued"]
        await asyncio.sleep(0.1)
    assert queued, "the task never queued"
    process.send_signal(signal.SIGINT)
    await asyncio.wait_for(process.wait(), 20)
    assert process.returncode == 130, (await process.stderr.read()).decode()
    row = await _wait_state(lab, queued[0].id, {"cancelled"})
    assert row["state"] == "cancelled"


@pytest.mark.slow
async def test_a_killed_client_leaves_the_task_to_the_server(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    await lab.serve()
    script = _script(lab, "gated.py", GATED)
    go = lab.cli.home / "go"
    process = await _spawn(lab, "dispatch", str(script), str(go), "5")
    assert process.stdout is not None
    await asyncio.wait_for(process.stdout.readline(), 30)
    process.kill()
    await process.wait()
    (task,) = await _tasks(lab)
    assert task["state"] == "running"
    go.touch()
    # The server follows the task to its end and records it (its reconciler would take 30 s).
    row = await _wait_state(lab, task["id"], {"failed"}, deadline_s=15.0)
    assert (row["state"], row["exit_code"]) == ("failed", 5)


@pytest.mark.slow
async def test_a_vanished_server_exits_9_and_the_task_runs_on(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    server = await lab.serve()
    script = _script(lab, "gated.py", GATED)
    go = lab.cli.home / "go"
    process = await _spawn(lab, "dispatch", str(script), str(go), "6")
    assert process.stdout is not None and process.stderr is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    pgid = int(line.split()[2])
    await server.stop(signal.SIGKILL)
    await asyncio.wait_for(process.wait(), 60)
    stderr = (await process.stderr.read()).decode()
    assert process.returncode == 9, stderr
    (task,) = await _tasks(lab)  # no server now: local mode, on the same database
    assert f"task {task['id']} goes on running on gpu1" in stderr
    assert f"fleet logs -f {task['id']}" in stderr
    os.killpg(pgid, 0)  # still running
    go.touch()
    await lab.serve()
    followed = await lab.run("logs", "-f", str(task["id"]))
    assert followed.returncode == 6, followed.stderr
    assert "done" in followed.stdout


async def _raw_request(socket_path: Path, head: str, body: bytes = b"") -> tuple[int, Any]:
    """One HTTP/1.1 request written by hand on the server's socket: (status, JSON body)."""
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    try:
        writer.write(head.encode() + b"\r\nConnection: close\r\n\r\n" + body)
        await writer.drain()
        head_bytes = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 15)
        headers = dict(line.split(": ", 1) for line in head_bytes.decode().split("\r\n")[1:]
                       if ": " in line)
        # By its length, not to EOF: after an early 413 the server lingers for the unsent body.
        content = await asyncio.wait_for(reader.readexactly(int(headers["Content-Length"])), 15)
    finally:
        writer.close()
    return int(head_bytes.split()[1]), json.loads(content)


async def test_bad_submissions_get_a_4xx_and_record_nothing(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    server = await lab.serve()
    status, body = await _raw_request(
        server.socket_path, "POST /v1/tasks HTTP/1.1\r\nHost: fleet\r\n"
        "Content-Type: application/json\r\nContent-Length: 999999999999")
    assert status == 413 and body["error"]["code"] == "too_large"
    unsafe = json.dumps({"files": [{"path": "run.sh", "data": ""},
                                   {"path": "../x", "data": ""}],
                         "extras": [], "shown_script": "run.sh", "shown_extras": [],
                         "placement": {}}).encode()
    for payload, message in ((b'{"files": 3}', "malformed request"),
                             (unsafe, "not a safe path")):
        status, body = await _raw_request(
            server.socket_path, "POST /v1/tasks HTTP/1.1\r\nHost: fleet\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}", payload)
        assert status == 400 and message in body["error"]["message"], body
        assert body["error"]["exit_code"] == 2
    assert await _tasks(lab) == []
    assert (await lab.run("tasks")).returncode == 0  # the server is still serving


async def test_a_dispatch_through_the_server_loads_no_database_or_ssh_library(
        serve_lab: ServeLabFactory) -> None:
    """The client's part is reading files and a stream: SQLAlchemy and asyncssh (~0.5 s of
    imports) are the server's business, and aiohttp (~0.2 s) too: the client speaks HTTP/1.1
    with h11 (fleet.client.http)."""
    lab = await serve_lab(1)
    await lab.serve()
    script = _script(lab, "sleep.py", SLEEPER)
    loaded = lab.cli.home / "modules.json"
    code = ("import atexit, json, runpy, sys\n"
            f"atexit.register(lambda: open({str(loaded)!r}, 'w').write("
            "json.dumps(sorted(sys.modules))))\n"
            f"sys.argv = ['fleet', 'dispatch', {str(script)!r}, '0']\n"
            "runpy.run_module('fleet.cli.main', run_name='__main__')\n")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, cwd=lab.cli.home, env=lab.cli.env(lab.env()),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    assert b"done" in stdout
    loaded_names = set(json.loads(loaded.read_text()))
    assert "fleet.client.http" in loaded_names  # it did go through the server
    modules = {name.split(".")[0] for name in loaded_names}
    heavy = {"sqlalchemy", "asyncssh", "textual", "aiohttp"}
    assert not modules & heavy, modules & heavy


@pytest.mark.slow
async def test_queued_tasks_survive_a_server_restart_in_their_order(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    server = await lab.serve()
    held = await lab.run("--json", "reserve", "--gpus", "1")
    assert held.returncode == 0, held.stderr
    (allocation,) = held.json()["allocation_ids"]
    script = _script(lab, "sleep.py", SLEEPER)
    waiting = []
    for seconds in ("1.2", "0.2"):
        waiting.append(await _spawn(lab, "dispatch", "--wait", str(script), seconds, "0"))
        deadline = time.monotonic() + 20
        while sum(t.state == "queued" for t in await lab.cli.recorded_tasks()) < len(waiting):
            assert time.monotonic() < deadline, "the task never queued"
            await asyncio.sleep(0.1)
    await server.stop()
    for process in waiting:
        assert process.stderr is not None
        await asyncio.wait_for(process.wait(), 30)
        stderr = (await process.stderr.read()).decode()
        assert process.returncode == 9, stderr
        assert "stays queued: the next fleet serve resumes it" in stderr
    first, second = await _tasks(lab)  # local mode now: no server
    assert (first["state"], second["state"]) == ("queued", "queued")

    await lab.serve()
    released = await lab.run("release", str(allocation))
    assert released.returncode == 0, released.stderr
    first = await _wait_state(lab, first["id"], {"succeeded", "failed", "cancelled"}, 30)
    second = await _wait_state(lab, second["id"], {"succeeded", "failed", "cancelled"}, 30)
    assert (first["state"], second["state"]) == ("succeeded", "succeeded"), (first, second)
    assert first["ended_at"] <= second["started_at"]  # one GPU, queue order kept
    done = await lab.run("logs", str(first["id"]))
    assert done.stdout.splitlines()[-1] == "done"
    staged = lab.cli.home / ".local" / "state" / "fleet" / "serve" / "staged"
    assert not list(staged.iterdir())
