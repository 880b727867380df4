"""Naming a task that does not exist is bad input: a clear message and exit code 2."""

from __future__ import annotations

from tests.fixtures.cli import FleetCli


async def test_logs_and_cancel_of_an_unknown_task_exit_2(fleet_cli: FleetCli) -> None:
    for args in (["logs", "4242"], ["cancel", "4242"]):
        result = await fleet_cli.run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "no task with id 4242" in result.stderr
        assert result.stdout == ""


async def test_cancel_json_reports_each_outcome_as_fields(fleet_cli: FleetCli) -> None:
    from db.hosts import sync_hosts
    from db.tasks import create_task, finish_task, update_task
    from db.types import HostFacts
    from fleet.service import open_database

    database = open_database(str(fleet_cli.db_path))
    try:
        with database.session() as session:
            host_ids = sync_hosts(session, [HostFacts(name="gone", address="127.0.0.9", port=22,
                                                      user=None, source="inventory")], 1)
            done = create_task(session, name="done", script="a.py", args=(), gpus_requested=0,
                               owner="ann", now=1, state="running")
            finish_task(session, done, state="succeeded", now=2, exit_code=0)
            stranded = create_task(session, name="stranded", script="b.py", args=(),
                                   gpus_requested=0, owner="ann", now=1, state="running")
            update_task(session, stranded, host_id=host_ids["gone"], remote_dir="/tmp/x",
                        remote_pid=123)
    finally:
        database.close()

    result = await fleet_cli.run("--json", "cancel", str(done), str(stranded))

    assert result.returncode == 1, result.stderr
    first, second = result.json()["tasks"]
    assert first == {"id": done, "state": "succeeded", "error": None}
    assert second["id"] == stranded and second["state"] is None
    assert "gone" in second["error"] and not second["error"].startswith("error:")
