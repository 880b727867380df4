"""CLI tests use the `fleet_cli` fixture from tests/fixtures/cli.py (registered for all areas)."""

from tests.fixtures.cli import CliResult, FleetCli

__all__ = ["CliResult", "FleetCli"]
