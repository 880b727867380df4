"""`fleet inventory check` loads the inventory exactly as the other commands: ~/.ssh/config too."""

from __future__ import annotations

from tests.cli.conftest import FleetCli


async def test_check_applies_ssh_config_duplicates(fleet_cli: FleetCli) -> None:
    inventory = fleet_cli.home / "inv.yaml"
    inventory.write_text("hosts:\n  a: {}\n  b: {}\n")
    ssh = fleet_cli.home / ".ssh"
    ssh.mkdir(exist_ok=True)
    (ssh / "config").write_text("Host a b\n  HostName 127.0.0.1\n  Port 22201\n")
    for args in (("inventory", "check", str(inventory)), ("-i", str(inventory), "hosts")):
        result = await fleet_cli.run(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert f"{inventory}:3:" in result.stderr and "ssh config" in result.stderr
        assert "127.0.0.1:22201" in result.stderr


async def test_check_reports_a_bad_ssh_config_line(fleet_cli: FleetCli) -> None:
    inventory = fleet_cli.home / "inv.yaml"
    inventory.write_text("hosts:\n  a: {}\n")
    ssh = fleet_cli.home / ".ssh"
    ssh.mkdir(exist_ok=True)
    (ssh / "config").write_text("Host a\n  Port abc\n")
    result = await fleet_cli.run("inventory", "check", str(inventory))
    assert result.returncode == 2, result.stdout
    assert f"{ssh / 'config'}:2:" in result.stderr


async def test_check_shows_resolved_address(fleet_cli: FleetCli) -> None:
    inventory = fleet_cli.home / "inv.yaml"
    inventory.write_text("hosts:\n  a: {}\n")
    ssh = fleet_cli.home / ".ssh"
    ssh.mkdir(exist_ok=True)
    (ssh / "config").write_text("Host a\n  HostName 10.9.9.9\n  Port 2222\n")
    result = await fleet_cli.run("--json", "inventory", "check", str(inventory))
    assert result.returncode == 0, result.stderr
    host = result.json()["hosts"][0]
    assert (host["address"], host["port"]) == ("10.9.9.9", 2222)
