"""An array through `fleet serve` outlives the server: stopped mid-array, its running members
run on and its queued ones stay queued; the next server drives it on within the same %MAX."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import ServeLab, ServeLabFactory

# Appends "start INDEX" and, once the gate file exists (at most 120 s, then exit 99), "end
# INDEX" to the runs file: a test sees members running for as long as its checks take.
GATED_MEMBER = """\
import os, sys, time
index = os.environ["FLEET_ARRAY_INDEX"]
runs, gate = sys.argv[1], sys.argv[2]
with open(runs, "a") as out:
    out.write(f"start {index}\\n")
deadline = time.monotonic() + 120
while not os.path.exists(gate):
    if time.monotonic() > deadline:
        sys.exit(99)
    time.sleep(0.05)
with open(runs, "a") as out:
    out.write(f"end {index}\\n")
"""


async def _members(lab: ServeLab) -> list[dict[str, Any]]:
    listed = await lab.run("--json", "tasks", "--all", "--expand")
    assert listed.returncode == 0, listed.stderr
    return sorted(listed.json()["tasks"], key=lambda task: task["group_index"])


async def _until(what: str, check: Any, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while not await check():
        assert time.monotonic() < deadline, f"not within {deadline_s:g}s: {what}"
        await asyncio.sleep(0.2)


def _most_at_once(lines: list[str]) -> int:
    running, most = 0, 0
    for line in lines:
        running += 1 if line.startswith("start") else -1
        most = max(most, running)
    return most


@pytest.mark.slow
async def test_an_array_is_driven_on_by_the_next_server(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(2)
    server = await lab.serve()
    script = lab.cli.home / "member.py"
    script.write_text(GATED_MEMBER)
    runs, gate = lab.cli.home / "runs.txt", lab.cli.home / "gate"
    runs.touch()
    detached = await lab.run("--json", "dispatch", "--array", "0-5%2", "--detach", str(script),
                             str(runs), str(gate))
    assert detached.returncode == 0, detached.stderr
    array_id = detached.json()["array_id"]

    async def two_running() -> bool:  # recorded running, not only started by their script
        members = sorted(await lab.cli.recorded_tasks(), key=lambda m: m.group_index or 0)
        return [m.state for m in members][:2] == ["running"] * 2

    await _until("two members running", two_running, 60)
    assert await server.stop() == 0
    members = await _members(lab)  # local mode now: no server
    assert [m["state"] for m in members] == ["running"] * 2 + ["queued"] * 4, members
    staged = lab.cli.home / ".local" / "state" / "fleet" / "serve" / "staged"
    (kept,) = staged.iterdir()
    assert (kept / "array.json").is_file()

    await lab.serve()
    gate.touch()

    async def array_ended() -> bool:
        members = await lab.cli.recorded_tasks()
        return len(members) == 6 and all(m.is_final for m in members)

    await _until("the array ended", array_ended, 120)
    members = await _members(lab)
    assert [(m["group_index"], m["state"]) for m in members] == [
        (index, "succeeded") for index in range(6)], members
    assert {m["group_id"] for m in members} == {array_id}
    lines = runs.read_text().splitlines()
    assert sorted(lines) == sorted([f"start {i}" for i in range(6)]
                                   + [f"end {i}" for i in range(6)])  # each index ran once
    assert _most_at_once(lines) == 2  # %2 held across the restart
    assert not list(staged.iterdir())
    assert (await lab.run("--json", "allocations")).json()["allocations"] == []


async def test_an_array_cancelled_while_no_server_runs_is_not_resumed(
        serve_lab: ServeLabFactory, tmp_path: Path) -> None:
    lab = await serve_lab(1)
    server = await lab.serve()
    script = lab.cli.home / "member.py"
    script.write_text(GATED_MEMBER)
    runs, gate = lab.cli.home / "runs.txt", tmp_path / "never"
    runs.touch()
    detached = await lab.run("--json", "dispatch", "--array", "0-2%1", "--detach", str(script),
                             str(runs), str(gate))
    assert detached.returncode == 0, detached.stderr

    async def one_started() -> bool:
        return bool(runs.read_text())

    await _until("a member started", one_started, 60)
    assert await server.stop() == 0
    cancelled = await lab.run("cancel", str(detached.json()["array_id"]))
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr

    await lab.serve()
    staged = lab.cli.home / ".local" / "state" / "fleet" / "serve" / "staged"

    async def dropped() -> bool:
        return not list(staged.iterdir())

    await _until("the kept array dropped", dropped, 30)
    members = await _members(lab)
    assert [m["state"] for m in members] == ["cancelled"] * 3, members
    assert runs.read_text().splitlines() == ["start 0"]  # nothing started after the cancel
