"""CLI input errors: clear messages on stderr naming the file/line, documented exit codes."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import FleetCli


async def test_bad_inventory_names_file_and_line_and_exits_2(fleet_cli: FleetCli) -> None:
    inventory = fleet_cli.home / "inventory.yaml"
    inventory.write_text("hosts:\n  gpu01:\n    address: 10.0.0.1\n    prot: 22\n")

    for args in (["status"], ["inventory", "check"], ["hosts"]):
        result = await fleet_cli.run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert f"{inventory}:4" in result.stderr
        assert "port" in result.stderr  # the did-you-mean hint
        assert result.stdout == ""


async def test_bad_time_arguments_exit_2(fleet_cli: FleetCli) -> None:
    bad_since = await fleet_cli.run("history", "gpus", "--since", "yesterday-ish")
    reversed_range = await fleet_cli.run("history", "gpus", "--since", "1h", "--until", "2h")
    bad_timeout = await fleet_cli.run("status", "--timeout", "fast")

    assert bad_since.returncode == 2 and "--since" in bad_since.stderr
    assert reversed_range.returncode == 2 and "before" in reversed_range.stderr
    assert bad_timeout.returncode == 2 and "--timeout" in bad_timeout.stderr


async def test_unknown_option_is_a_usage_error(fleet_cli: FleetCli) -> None:
    result = await fleet_cli.run("status", "--frobnicate")
    assert result.returncode == 2
    assert result.stderr.startswith("fleet: error: No such option '--frobnicate'")
    assert "Usage: fleet status [OPTIONS]" in result.stderr


async def test_unwritable_database_is_a_storage_error(fleet_cli: FleetCli) -> None:
    result = await fleet_cli.run("--db", "/proc/fleet/nope.db", "hosts")
    assert result.returncode == 4
    assert "/proc/fleet/nope.db" in result.stderr


async def test_a_home_of_no_user_in_an_sqlite_url_is_a_storage_error(
        fleet_cli: FleetCli) -> None:
    for args in (["hosts"], ["db", "check"]):
        result = await fleet_cli.run("--db", "sqlite:///~no-such-user-here/x.db", *args)
        assert result.returncode == 4, (args, result.stderr)
        assert "no user 'no-such-user-here'" in result.stderr
    assert not Path("~no-such-user-here").exists()  # relative to the CLI's working directory


async def test_pattern_matching_no_host_exits_2(fleet_cli: FleetCli) -> None:
    (fleet_cli.home / "inventory.yaml").write_text("hosts:\n  gpu01: {address: 10.9.9.9}\n")
    result = await fleet_cli.run("status", "--hosts", "nothing*")
    assert result.returncode == 2
    assert "nothing*" in result.stderr


async def test_every_command_has_help_with_an_example(fleet_cli: FleetCli) -> None:
    for args in (["--help"], ["status", "--help"], ["hosts", "--help"],
                 ["inventory", "check", "--help"], ["history", "gpus", "--help"]):
        result = await fleet_cli.run(*args)
        assert result.returncode == 0, args
        assert "fleet " in result.stdout.split("Example", 1)[-1], args
    version = await fleet_cli.run("--version")
    assert version.stdout.startswith("fleet, version ")


async def test_monitoring_an_empty_inventory_says_so_and_exits_2(fleet_cli: FleetCli) -> None:
    (fleet_cli.home / "inventory.yaml").write_text("version: 1\nhosts: {}\n")
    for args in (["monitor"], ["serve", "--socket", str(fleet_cli.home / "fleet.sock")]):
        result = await fleet_cli.run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "no hosts to monitor: the inventory lists none and none are adopted" in \
            result.stderr, args
        assert "None" not in result.stderr, args


async def test_values_out_of_range_are_bad_input_not_tracebacks(fleet_cli: FleetCli) -> None:
    inventory = fleet_cli.home / "inventory.yaml"
    inventory.write_text("hosts:\n  a: {address: 127.0.0.1, port: 1}\n"
                         "settings:\n  monitor:\n    interval: .nan\n")
    huge = str(2**63)
    cases = {
        ("tasks", huge): "ids are at most",
        ("logs", f"{huge}:1"): "ids are at most",
        ("cancel", huge): "ids are at most",
        ("release", huge): "ID",
        ("events", "--since", "0001-01-01"): "outside 1970-01-01 .. 9999-12-31",
        ("history", "gpus", "--until", "9" * 20): "outside 1970-01-01 .. 9999-12-31",
        ("usage", "--since", "9999999999999d"): "longer than a century",
        ("events", "--limit", huge): "--limit",
        ("history", "hosts", "--limit", huge): "--limit",
        ("reserve", "--for", "nan"): "a duration is a finite number of seconds",
        ("status", "--timeout", "inf"): "a duration is a finite number of seconds",
        ("inventory", "check"): f"{inventory}:5: monitor.interval must be a finite number",
    }
    for args, words in cases.items():
        result = await fleet_cli.run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert words in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)


async def test_json_and_another_format_is_a_usage_error(fleet_cli: FleetCli) -> None:
    for args in (["history", "gpus"], ["history", "hosts"], ["usage"]):
        result = await fleet_cli.run("--json", *args, "--format", "table")
        assert result.returncode == 2 and result.stdout == "", (args, result.stdout)
        assert "--json and --format table ask for different output" in result.stderr
        agreed = await fleet_cli.run(*args, "--json", "--format", "json")
        assert agreed.returncode == 0 and agreed.stdout.startswith("{"), (args, agreed.stderr)


async def test_options_that_mean_nothing_alone_or_empty_are_usage_errors(
        fleet_cli: FleetCli) -> None:
    script = fleet_cli.home / "ok.py"
    script.write_text("print(1)\n")
    cases = {
        ("dispatch", "--python", "", str(script)): "'--python': must not be empty",
        ("dispatch", "--workdir", " ", str(script)): "'--workdir': must not be empty",
        ("run", "--python", "", "--", "true"): "'--python': must not be empty",
        ("dispatch", "--hostfile", "hosts.txt", str(script)): "--hostfile needs --nodes",
        ("run", "--timeout", "0s", "--", "true"): "--timeout must be positive",
    }
    for args, words in cases.items():
        result = await fleet_cli.run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert words in result.stderr, (args, result.stderr)


async def test_arguments_that_are_not_utf8_are_refused_before_anything_runs(
        fleet_cli: FleetCli) -> None:
    for args in (["status", "--hosts", "\udcff\udcfe"], ["events", "--kind", "x\udcff"],
                 ["drain", "a\udcff", "--reason", "x"]):
        result = await fleet_cli.run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "is not UTF-8 text" in result.stderr and "Traceback" not in result.stderr
