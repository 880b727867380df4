"""The settings' `ssh:` timeouts bound every command's connections, not only the monitor's."""

from __future__ import annotations

import asyncio

from fleet.monitor.settings import SshSettings
from fleet.ssh.options import SshOptions
from tests.fixtures.cli import FleetCli


def test_the_default_ssh_settings_are_sshoptions_own_defaults() -> None:
    # FleetContext skips loading the settings when there are none; that is only right while
    # the defaults agree.
    assert SshSettings().apply(SshOptions()) == SshOptions()


async def _silent_listener() -> tuple[asyncio.Server, int]:
    """A TCP port on loopback that accepts and never says a word (no SSH banner)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_status_waits_for_a_login_only_as_long_as_the_settings_say(
        fleet_cli: FleetCli) -> None:
    server, port = await _silent_listener()
    try:
        (fleet_cli.home / "inventory.yaml").write_text(
            f"hosts:\n  mute: {{address: 127.0.0.1, port: {port}}}\n")
        config = fleet_cli.home / ".config" / "fleet" / "config.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text("ssh:\n  connect_timeout: 1s\n  login_timeout: 1s\n")
        result = await fleet_cli.run("status", "--timeout", "20s")
        assert result.returncode == 3, result.stderr
        assert "within 1s" in result.stdout + result.stderr, (result.stdout, result.stderr)

        config.write_text("ssh:\n  connect_timeout: soon\n")
        result = await fleet_cli.run("status")
        assert result.returncode == 2 and f"{config}:2" in result.stderr, result.stderr
    finally:
        server.close()
        await server.wait_closed()
