"""The exit-code table is one list: `fleet --help`, the README and the error classes agree."""

from __future__ import annotations

import re
from pathlib import Path

import click.testing

from fleet import errors
from fleet.cli.main import cli
from fleet.render import exit_codes

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_lists_exactly_the_exit_codes_fleet_knows() -> None:
    section = README.read_text().split("### Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = [int(code) for code in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)]
    assert documented == [code for code, _meaning in exit_codes.EXIT_CODES]


def test_help_ends_with_the_exit_code_table() -> None:
    output = click.testing.CliRunner().invoke(cli, ["--help"]).output
    listed = re.findall(r"^\s+(\d+)  ", output.split("Exit codes:", 1)[1], re.MULTILINE)
    assert [int(code) for code in listed] == [code for code, _meaning in exit_codes.EXIT_CODES]


def test_error_classes_use_the_table() -> None:
    assert errors.FleetError.exit_code == exit_codes.EXIT_FAILED
    assert errors.ConfigError.exit_code == exit_codes.EXIT_BAD_INPUT
    assert errors.HostError.exit_code == exit_codes.EXIT_HOST_FAILED
    assert errors.StorageError.exit_code == exit_codes.EXIT_STORAGE
    assert errors.DispatchError.exit_code == exit_codes.EXIT_DISPATCH
    assert errors.AllocationConflict.exit_code == exit_codes.EXIT_CONFLICT
    assert errors.NoPlacement.exit_code == exit_codes.EXIT_NO_PLACEMENT


def test_task_endings_map_to_their_codes() -> None:
    assert exit_codes.task_exit_code("succeeded", 0, timed_out=False) == 0
    assert exit_codes.task_exit_code("failed", 3, timed_out=False) == 3
    assert exit_codes.task_exit_code("failed", None, timed_out=True) == exit_codes.EXIT_TIMED_OUT
    assert exit_codes.task_exit_code("cancelled", -15, timed_out=False) == 130
    assert exit_codes.task_exit_code("failed", None, timed_out=False) == exit_codes.EXIT_FAILED
