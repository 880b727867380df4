"""Naming a task that does not exist is bad input: a clear message and exit code 2."""

from __future__ import annotations

from tests.fixtures.cli import FleetCli


async def test_logs_and_cancel_of_an_unknown_task_exit_2(fleet_cli: FleetCli) -> None:
    for args in (["logs", "4242"], ["cancel", "4242"]):
        result = await fleet_cli.run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "no task with id 4242" in result.stderr
        assert result.stdout == ""
