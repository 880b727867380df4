"""Job arrays through the CLI on loopback SSH hosts: each index once, at most MAX at once,
values substituted without a shell, the failure summary and exit code, folding, cancel, logs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from tests.dispatch.conftest import DispatchLab
from tests.dispatch.test_dispatch_cli import _active_allocations, _script, _tasks

LabFactory = Callable[..., Awaitable[DispatchLab]]

# Appends "index start end gpus" to argv[1]; index 5 exits 3; argv[2:] are echoed as JSON.
MEMBER = """\
import json, os, sys, time
index = int(os.environ["FLEET_ARRAY_INDEX"])
start = time.time()
time.sleep(0.6)
line = "%d %f %f %s %s %s\\n" % (index, start, time.time(), os.environ["CUDA_VISIBLE_DEVICES"],
                              os.environ["FLEET_ARRAY_ID"], os.environ["FLEET_ARRAY_SIZE"])
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, line.encode())
os.close(fd)
print(json.dumps({"index": index, "args": sys.argv[2:]}))
sys.exit(3 if index == 5 else 0)
"""


@pytest.mark.slow
async def test_an_array_of_sixteen_runs_each_index_once_at_most_four_at_a_time(
        dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(4, 4)
    script = _script(lab, "member.py", MEMBER)
    record = lab.cli.home / "runs.txt"

    result = await lab.cli.run("dispatch", "--array", "0-15%4", str(script), str(record),
                               "{index}", timeout=240)

    assert result.returncode == 3, result.stdout + result.stderr
    assert "1 failed, 15 succeeded" in result.stderr
    assert "index 5: exit code 3" in result.stderr
    runs = [line.split() for line in record.read_text().splitlines()]
    assert sorted(int(run[0]) for run in runs) == list(range(16))
    array_ids = {run[4] for run in runs}
    assert len(array_ids) == 1 and {run[5] for run in runs} == {"16"}
    events = sorted([(float(run[1]), 1) for run in runs] + [(float(run[2]), -1) for run in runs])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert 1 < peak <= 4, peak
    printed = [json.loads(line.partition("] ")[2]) for line in result.stdout.splitlines()
               if "] {" in line]
    assert sorted(item["index"] for item in printed) == list(range(16))
    assert all(item["args"] == [str(item["index"])] for item in printed)

    (folded,) = await _tasks(lab)
    assert folded["group"]["kind"] == "array" and folded["group"]["size"] == 16
    assert folded["state"] == "failed" and folded["exit_code"] == 3
    assert folded["group"]["states"] == {"failed": 1, "succeeded": 15}
    assert str(folded["id"]) == array_ids.pop()
    table = await lab.cli.run("tasks", "--all")
    assert "[array 16]" in table.stdout and "1 failed, 15 succeeded" in table.stdout
    expanded = (await lab.cli.run("--json", "tasks", "--all", "--expand")).json()["tasks"]
    assert sorted(task["group_index"] for task in expanded) == list(range(16))
    member = await lab.cli.run("logs", f"{folded['id']}:7")
    assert member.returncode == 0 and json.loads(member.stdout)["index"] == 7
    assert await _active_allocations(lab) == []


@pytest.mark.slow
async def test_array_values_fill_placeholders_literally(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(2)
    script = _script(lab, "member.py", MEMBER)
    values = lab.cli.home / "grid.txt"
    values.write_text("# lr and name per index\nlr=3e-4 name='a b'\n\nlr=1e-3 name=$(reboot)\n")

    result = await lab.cli.run("dispatch", "--array", "10-11", "--array-values", str(values),
                               str(script), str(lab.cli.home / "runs.txt"), "--lr={lr}",
                               "{name}", "{{literal}}", timeout=120)

    assert result.returncode == 0, result.stdout + result.stderr
    printed = {item["index"]: item["args"] for item in (
        json.loads(line.partition("] ")[2]) for line in result.stdout.splitlines()
        if "] {" in line)}
    assert printed == {10: ["--lr=3e-4", "a b", "{literal}"],
                       11: ["--lr=1e-3", "$(reboot)", "{literal}"]}


@pytest.mark.slow
async def test_cancelling_an_array_stops_its_unfinished_members(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)
    script = _script(lab, "sleep.py", "import time\ntime.sleep(60)\n")
    process = await lab.spawn("dispatch", "--array", "0-5%1", "--grace", "1s", str(script))
    try:
        array_id = None
        for _ in range(300):
            tasks = await lab.cli.recorded_tasks()
            if any(task.state == "running" for task in tasks):
                array_id = tasks[0].group_id
                break
            await asyncio.sleep(0.2)
        assert array_id is not None
        cancel = await lab.cli.run("cancel", str(array_id))
        assert cancel.returncode == 0, cancel.stderr
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 130, stderr.decode()
    states = [task["state"] for task in await _tasks(lab, "--expand")]
    assert states == ["cancelled"] * 6
    assert await _active_allocations(lab) == []


# (options before the script, arguments after it, what stderr says)
BAD_INPUT: list[tuple[tuple[str, ...], tuple[str, ...], str]] = [
    (("--array", "5-1"), (), "ends before it starts"),
    (("--array", "0-99999"), (), "needs --force"),
    (("--array", "0-3"), ("{missing}",), "no value for the placeholder {missing}"),
    (("--array-values", "grid.txt"), (), "--array-values needs --array"),
    (("--array", "0-3", "--array-values", "grid.txt"), (), "1 line(s) of values"),
    (("--array", "0-1", "--detach"), (), "--array --detach"),
    (("--nodes", "0"), (), "--nodes"),
    (("--nodes", "3"), (), "fleet manages only 2 host(s)"),
    (("--nodes", "2", "--hostfile", "../escape"), (), "must be a relative path inside the task"),
    (("--nodes", "2", "--hostfile", "."), (), "must be a relative path inside the task"),
    (("--nodes", "2", "--env", "MASTER_PORT=1"), (), "fleet sets this for every node of a gang"),
    (("--gpus-per-node", "2"), (), "--gpus-per-node needs --nodes"),
    (("--nodes", "2", "--array", "0-1"), (), "do not go together"),
]


@pytest.mark.slow
async def test_bad_group_input_exits_2_before_anything_is_recorded(
        dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(2, 2)
    script = _script(lab, "ok.py", "print('ran')\n")
    (lab.cli.home / "grid.txt").write_text("a=1\n")
    for options, args, message in BAD_INPUT:
        result = await lab.cli.run("dispatch", *options, str(script), *args)
        assert result.returncode == 2, (options, result.stdout, result.stderr)
        assert message in result.stderr, (options, result.stderr)
    assert await _tasks(lab) == []
