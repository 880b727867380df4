"""One grammar for every command: `--json` after the command, `--hosts`, JSON objects, help."""

from __future__ import annotations

from typing import Any

import click
import click.testing

from fleet.cli.main import cli
from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from tests.cli.conftest import FleetCli
from tests.fixtures.cli_commands import leaf_commands

LOCAL_INVENTORY = "hosts:\n  workstation:\n    connection: local\n"
# Commands that print no data document: the UI, its demo, and raw task output.
WITHOUT_JSON = {"fleet tui", "fleet demo", "fleet logs", "fleet serve",  # interactive or a daemon
                "fleet web"}  # a forwarder for the browser: it prints one link
SELECTING_HOSTS = {"fleet status", "fleet hosts", "fleet monitor", "fleet run",
                   "fleet history gpus", "fleet history hosts", "fleet events",
                   "fleet reserve", "fleet dispatch", "fleet tui"}


def test_every_command_is_listed_and_loads() -> None:
    paths = [path for path, _ in leaf_commands(cli)]
    assert len(paths) > 30 and {"fleet status", "fleet db backup", "fleet tui"} <= set(paths)


def _option_names(command: click.Command) -> dict[str, click.Parameter]:
    return {name: param for param in command.params for name in param.opts}


def test_every_data_command_accepts_json_after_it() -> None:
    missing = [path for path, command in leaf_commands(cli)
               if path not in WITHOUT_JSON and "--json" not in _option_names(command)]
    assert missing == []


def test_hosts_selects_hosts_everywhere_with_host_as_its_alias() -> None:
    selecting = {}
    for path, command in leaf_commands(cli):
        options = _option_names(command)
        if "--host" in options or "--hosts" in options:
            selecting[path] = options.get("--hosts") is options.get("--host")
    assert set(selecting) >= SELECTING_HOSTS
    assert all(selecting.values()), selecting


def test_every_command_has_help_with_an_example() -> None:
    runner = click.testing.CliRunner()
    for path, _command in leaf_commands(cli):
        result = runner.invoke(cli, [*path.split()[1:], "--help"])
        assert result.exit_code == 0, path
        assert "Example" in result.output and "fleet " in result.output.split("Example")[1], path


def _local_gpus(fleet_cli: FleetCli, sim_tools: SimTools) -> dict[str, str]:
    (fleet_cli.home / "inventory.yaml").write_text(LOCAL_INVENTORY)
    config = fleet_cli.home / "gpus.conf"
    write_config(config, scenarios.busy(2, host="workstation"))
    return sim_tools.env(config)


def _steady(status: dict[str, Any]) -> dict[str, Any]:
    """A status document without what changes between two probes (timings, load, memory)."""
    return {"hosts": [{key: value for key, value in host.items()
                       if key not in ("elapsed_s", "probed_at", "host")}
                      for host in status["hosts"]]}


async def test_json_after_the_command_gives_the_same_documents(
    fleet_cli: FleetCli, sim_tools: SimTools
) -> None:
    env = _local_gpus(fleet_cli, sim_tools)

    before = await fleet_cli.run("--json", "status", env=env)
    after = await fleet_cli.run("status", "--json", env=env)
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert _steady(after.json()) == _steady(before.json())
    assert [gpu["uuid"] for gpu in after.json()["hosts"][0]["gpus"]] == [
        scenarios.gpu_uuid("workstation", 0), scenarios.gpu_uuid("workstation", 1)]

    for args in (["hosts"], ["tasks"], ["tasks", "--all"], ["allocations"]):
        before = await fleet_cli.run("--json", *args)
        after = await fleet_cli.run(*args, "--json")
        assert before.returncode == after.returncode == 0, (args, after.stderr)
        assert after.json() == before.json(), args
    hosts = (await fleet_cli.run("hosts", "--json")).json()["hosts"]
    assert [(host["name"], host["state"], host["gpu_count"]) for host in hosts] == [
        ("workstation", "up", 2)]


async def test_every_json_document_is_an_object_with_a_named_list(fleet_cli: FleetCli) -> None:
    (fleet_cli.home / "inventory.yaml").write_text(LOCAL_INVENTORY)
    named_lists = {
        ("allocations",): "allocations", ("allocations", "--all"): "allocations",
        ("tasks",): "tasks", ("hosts",): "hosts", ("candidates",): "hosts",
        ("events",): "events", ("history", "gpus"): "points", ("history", "hosts"): "points",
        ("inventory", "check"): "hosts", ("config", "show"): "files",
        ("release", "--all-mine"): "released",
    }
    for args, key in named_lists.items():
        result = await fleet_cli.run(*args, "--json")
        assert result.returncode == 0, (args, result.stderr)
        document = result.json()
        assert isinstance(document, dict), args
        assert isinstance(document[key], list), args


async def test_usage_errors_look_like_every_other_error(fleet_cli: FleetCli) -> None:
    cases = {
        ("status", "--frobnicate"): "No such option '--frobnicate'",
        ("cancel",): "Missing argument 'TASK...'",
        ("reserve", "--gpus", "many"): "Invalid value for '--gpus'",
        ("history", "gpus", "--format", "xml"): "Invalid value for '--format'",
        ("frobnicate",): "No such command 'frobnicate'",
        ("statsu",): "No such command 'statsu'. Did you mean 'status'?",  # not yet imported
    }
    for args, message in cases.items():
        result = await fleet_cli.run(*args)
        assert result.returncode == 2, (args, result.stderr)
        first, *rest = result.stderr.splitlines()
        assert first.startswith(f"fleet: error: {message}"), (args, result.stderr)
        assert not any(line.startswith("Error:") for line in rest), (args, result.stderr)
        assert rest[-1].startswith("Try 'fleet") and rest[-1].endswith(" --help' for help.")
        assert result.stdout == ""
