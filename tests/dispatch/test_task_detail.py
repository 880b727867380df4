"""`fleet tasks TASK...`: one task in full (text and JSON), a gang with its nodes, bad ids."""

from __future__ import annotations

from tests.fixtures.cli import FleetCli


def _seed(fleet_cli: FleetCli) -> dict[str, int]:
    """A finished task that ran in a container, and a two-node gang that failed."""
    from db.hosts import sync_hosts
    from db.tasks import create_task, finish_task, update_task
    from db.types import HostFacts
    from fleet.service import open_database

    database = open_database(str(fleet_cli.db_path))
    try:
        with database.session() as session:
            host_ids = sync_hosts(session, [HostFacts(name="gpu-a", address="127.0.0.9",
                                                      port=22, user=None, source="inventory")], 1)
            single = create_task(
                session, name="train", script="train.py", args=("--lr", "3e-4", "a b"),
                gpus_requested=1, owner="ann", now=1_700_000_000, state="running",
                constraints={"environment": {"kind": "container", "value": "pytorch:24.01",
                                             "tool": "/usr/bin/podman", "runtime": "podman"}})
            update_task(session, single, host_id=host_ids["gpu-a"], remote_dir="/tmp/t1",
                        started_at=1_700_000_000,
                        remote_pid=4242)
            finish_task(session, single, state="succeeded", now=1_700_000_062, exit_code=0)
            rank0 = create_task(session, name="ddp", script="ddp.py", args=(), gpus_requested=2,
                                owner="bob", now=1_700_000_100, state="running",
                                group_kind="gang", group_index=0)
            rank1 = create_task(session, name="ddp", script="ddp.py", args=(), gpus_requested=2,
                                owner="bob", now=1_700_000_100, state="running",
                                group_kind="gang", group_index=1, group_id=rank0)
            finish_task(session, rank1, state="failed", now=1_700_000_130, exit_code=3)
            finish_task(session, rank0, state="cancelled", now=1_700_000_131, exit_code=None)
    finally:
        database.close()
    return {"single": single, "rank0": rank0, "rank1": rank1}


async def test_one_task_in_full(fleet_cli: FleetCli) -> None:
    ids = _seed(fleet_cli)
    result = await fleet_cli.run("tasks", str(ids["single"]))
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.splitlines()[0] == f"task {ids['single']}: train — succeeded, exit code 0"
    assert "train.py --lr 3e-4 'a b'" in text  # the command as a shell would take it
    assert "--container pytorch:24.01 (podman)" in text
    assert "gpu-a" in text and "4242" in text and "0:01:02" in text
    assert "gang" not in text


async def test_a_gang_shows_its_nodes_and_json_carries_them(fleet_cli: FleetCli) -> None:
    ids = _seed(fleet_cli)
    text = (await fleet_cli.run("tasks", str(ids["rank0"]))).stdout
    assert f"gang {ids['rank0']}: 2 tasks" in text
    assert "failed" in text and "cancelled" in text  # both nodes' rows
    result = await fleet_cli.run("--json", "tasks", str(ids["single"]), str(ids["rank0"]))
    assert result.returncode == 0, result.stderr
    single, gang = result.json()["tasks"]
    assert single["id"] == ids["single"] and "members" not in single
    assert single["environment"]["runtime"] == "podman"
    assert [m["id"] for m in gang["members"]] == [ids["rank0"], ids["rank1"]]
    assert [m["exit_code"] for m in gang["members"]] == [None, 3]


async def test_unknown_or_malformed_ids_and_mixed_options_exit_2(fleet_cli: FleetCli) -> None:
    ids = _seed(fleet_cli)
    for args, message in ((["tasks", "4242"], "no task with id 4242"),
                          (["tasks", "x1"], "is not a task id"),
                          (["tasks", f"{ids['rank0']}:7"], "is a gang, not an array"),
                          (["tasks", "--all", str(ids["single"])], "take no --state")):
        result = await fleet_cli.run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert result.stdout == ""


def test_control_characters_in_recorded_text_are_shown_as_marks() -> None:
    from db.rows import TaskRow
    from fleet.render.task_detail import render_task_detail

    row = TaskRow(id=1, name="evil\rname", script="a.sh", args=("x\ny", "\x01\x7f"),
                  host_id=None, host=None, state="failed", exit_code=1, gpus_requested=1,
                  constraints={}, priority=0, owner="ann", remote_dir=None, remote_pid=None,
                  submitted_at=100, started_at=None, ended_at=110, error="line one\nline two",
                  gpu_seconds=None, peak_memory_bytes=None, group_id=None, group_kind=None,
                  group_index=None)
    shown = render_task_detail(row, [])
    assert not {"\r", "\x01", "\x7f"} & set(shown)
    assert shown.startswith("task 1: evil?name — failed") and "line one?line two" in shown
    assert len(shown.split("\n")) == 1 + sum(1 for line in shown.split("\n")[1:]
                                             if line.startswith("  "))  # no value split a line
