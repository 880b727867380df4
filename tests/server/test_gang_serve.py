"""Gangs and arrays through a real `fleet serve`: the server claims, starts and follows every
node (or drives every member, also detached); the client sees prefixed output, the end, and one
folded row; a failing node ends the gang with its code."""

from __future__ import annotations

import asyncio

from tests.server.conftest import ServeLabFactory

NODE = """\
import os, sys
print("rank", os.environ["NODE_RANK"], "of", os.environ["NNODES"], "cuda",
      os.environ["CUDA_VISIBLE_DEVICES"], "master", os.environ["MASTER_ADDR"],
      os.environ["MASTER_PORT"], flush=True)
sys.exit(int(os.environ["NODE_RANK"]) * int(sys.argv[1]))
"""


async def test_a_gang_through_the_server(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(2, 2)
    await lab.serve()
    script = lab.cli.home / "node.py"
    script.write_text(NODE)

    result = await lab.run("dispatch", "--nodes", "2", "--gpus-per-node", "2", str(script), "0")

    assert result.returncode == 0, result.stdout + result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if "rank" in line)
    assert [line.split("] ")[0] for line in lines] == ["[0/gpu1", "[1/gpu2"]
    assert all(" of 2 cuda " in line for line in lines)
    ports = {line.split()[-1] for line in lines}
    assert len(ports) == 1 and ports.pop().isdigit()
    assert "started on 2 nodes" in result.stderr and "node 1 (task" in result.stderr
    listing = (await lab.run("--json", "tasks", "--all")).json()["tasks"]
    assert [(task["state"], task["group"]["nodes"]) for task in listing] == [("succeeded", 2)]

    failed = await lab.run("dispatch", "--nodes", "2", str(script), "5")
    assert failed.returncode == 5, failed.stdout + failed.stderr
    assert "node 1 (gpu2): exit code 5" in failed.stderr
    allocations = (await lab.run("--json", "allocations")).json()["allocations"]
    assert allocations == []


MEMBER = """\
import os, sys
index = int(os.environ["FLEET_ARRAY_INDEX"])
print("member", index, "of", os.environ["FLEET_ARRAY_SIZE"], "args", *sys.argv[1:], flush=True)
sys.exit(4 if index == 2 else 0)
"""


async def test_an_array_through_the_server(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(2, 1)
    await lab.serve()
    script = lab.cli.home / "member.py"
    script.write_text(MEMBER)

    result = await lab.run("dispatch", "--array", "0-5%2", str(script), "--x={index}")

    assert result.returncode == 4, result.stdout + result.stderr
    lines = sorted(line.split("] ", 1)[1] for line in result.stdout.splitlines() if "] " in line)
    assert lines == [f"member {i} of 6 args --x={i}" for i in range(6)]
    assert "1 failed, 5 succeeded" in result.stderr and "index 2: exit code 4" in result.stderr
    (row,) = (await lab.run("--json", "tasks", "--all")).json()["tasks"]
    assert row["group"]["kind"] == "array" and row["group"]["states"] == {
        "failed": 1, "succeeded": 5}
    assert (await lab.run("--json", "allocations")).json()["allocations"] == []


async def test_a_detached_array_is_driven_by_the_server(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    await lab.serve()
    script = lab.cli.home / "member.py"
    script.write_text(MEMBER)

    detached = await lab.run("--json", "dispatch", "--array", "0-3%1", "--detach", str(script))

    assert detached.returncode == 0, detached.stderr
    array_id = detached.json()["array_id"]
    assert len(detached.json()["tasks"]) == 4
    for _ in range(300):  # bounded: the server runs the members one at a time
        members = await lab.cli.recorded_tasks()
        if len(members) == 4 and all(member.is_final for member in members):
            break
        await asyncio.sleep(0.2)
    (row,) = (await lab.run("--json", "tasks", "--all")).json()["tasks"]
    assert row["id"] == array_id and row["state"] == "failed"
    assert row["group"]["states"] == {"failed": 1, "succeeded": 3}
