"""Array specs, values files and placeholders (pure): what each accepts and how it refuses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleet.dispatch.array_spec import (
    MAX_WITHOUT_FORCE,
    parse_array,
    read_values,
    substitute,
)
from fleet.errors import ConfigError


@pytest.mark.parametrize(("text", "indices", "max_running"), [
    ("0-3", (0, 1, 2, 3), None),
    ("0-9:3%2", (0, 3, 6, 9), 2),
    ("1,3,5-9:2", (1, 3, 5, 7, 9), None),
    ("7", (7,), None),
    ("2-4,3-5%1", (2, 3, 4, 5), 1),
    ("0-1%99999999999999999999999", (0, 1), 2),  # one waiter per member, not 10^23 of them
])
def test_specs(text: str, indices: tuple[int, ...], max_running: int | None) -> None:
    spec = parse_array(text)
    assert (spec.indices, spec.max_running, spec.size) == (indices, max_running, len(indices))


@pytest.mark.parametrize(("text", "message"), [
    ("5-1", "ends before it starts"),
    ("0-3%0", "%MAX must be a whole number"),
    ("0-3:0", "STEP must be at least 1"),
    ("a-b", "is not N, A-B or A-B:STEP"),
    ("", "is not N"),
    (f"0-{MAX_WITHOUT_FORCE}", "needs --force"),
    ("0-99999999", "more than 1,000,000 members"),
    ("99999999999999999999999", "an index is at most 2,147,483,647"),
    ("0-3%²", "%MAX must be a whole number"),
])
def test_bad_specs(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_array(text)


def test_force_allows_large_arrays() -> None:
    assert parse_array(f"0-{MAX_WITHOUT_FORCE}", force=True).size == MAX_WITHOUT_FORCE + 1


def test_values_file(tmp_path: Path) -> None:
    path = tmp_path / "grid.txt"
    path.write_text("# comment\nlr=1e-3 tag='a b'\n\nlr=3e-4 tag=\"$HOME\"\n")
    assert read_values(path, 2) == [{"lr": "1e-3", "tag": "a b"}, {"lr": "3e-4", "tag": "$HOME"}]
    with pytest.raises(ConfigError, match="2 line\\(s\\) of values for an array of 3"):
        read_values(path, 3)
    path.write_text("lr 1e-3\n")
    with pytest.raises(ConfigError, match=f"{path}:1: 'lr' is not key=value"):
        read_values(path, 1)
    path.write_text("index=5\n")
    with pytest.raises(ConfigError, match=f"{path}:1: 'index' is the array index itself"):
        read_values(path, 1)
    path.write_text("lr=1 lr=2\n")
    with pytest.raises(ConfigError, match=f"{path}:1: 'lr' is given twice"):
        read_values(path, 1)
    path.write_text("lr='open\n")
    with pytest.raises(ConfigError, match=f"{path}:1"):
        read_values(path, 1)


def test_substitution_is_literal_and_refuses_missing_values() -> None:
    args = ("--lr={lr}", "{index}", "{{x}}", "$(reboot)", "{lr}{lr}")
    assert substitute(args, {"lr": "0.1"}, 4, where="line 1") == (
        "--lr=0.1", "4", "{x}", "$(reboot)", "0.10.1")
    with pytest.raises(ConfigError, match=re.escape("line 9: no value for the placeholder {seed}")):
        substitute(("{seed}",), {}, 0, where="line 9")
