"""Pure parts of the monitor: line splitting, coalescing subscribers, backoff, settings files."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from fleet.errors import ConfigError
from fleet.model import HostSpec
from fleet.monitor.config import default_settings, load_settings
from fleet.monitor.lines import LineSplitter, OverlongLine
from fleet.monitor.snapshots import SnapshotHub
from fleet.snapshot import FleetSnapshot, HostSnapshot
from fleet.ssh.pool import Backoff


def test_line_splitter_splits_drops_overlong_lines_and_keeps_partial_tail() -> None:
    splitter = LineSplitter(limit=256)
    chunks = [b"one\ntw", b"o\n", b"x" * 300, b"x" * 300 + b"\nthree\n", b"tail"]
    lines = [line for chunk in chunks for line in splitter.feed(chunk)]
    assert lines[:2] == [b"one", b"two"]
    assert isinstance(lines[2], OverlongLine) and lines[2].size == 600
    assert lines[3:] == [b"three"]
    assert splitter.finish() is None and splitter.partial == b"tail"


def test_line_splitter_drops_a_line_past_the_limit_within_one_chunk_and_at_the_end() -> None:
    splitter = LineSplitter(limit=8)
    lines = splitter.feed(b"short\n" + b"y" * 9 + b"\nok\n" + b"z" * 20)
    assert lines[0] == b"short" and lines[2] == b"ok"
    assert isinstance(lines[1], OverlongLine) and lines[1].size == 9
    overlong = splitter.finish()  # an overlong unterminated end is reported, not kept
    assert isinstance(overlong, OverlongLine) and overlong.size == 20
    assert splitter.partial == b""


def _snapshot(n: int, changed: set[str]) -> FleetSnapshot:
    hosts = tuple(HostSnapshot(spec=HostSpec(f"h{i}", f"10.0.0.{i}"), state="up") for i in range(3))
    return FleetSnapshot(float(n), hosts, frozenset(changed))


async def test_slow_subscriber_gets_newest_snapshot_with_every_change_coalesced() -> None:
    hub = SnapshotHub()
    hub.publish(_snapshot(0, set()))
    updates = hub.subscribe()
    first = await anext(updates)
    assert first.taken_at == 0 and first.changed == {"h0", "h1", "h2"}
    for n in range(1, 1001):  # the subscriber reads nothing while 1000 updates arrive
        hub.publish(_snapshot(n, {f"h{n % 2}"}))
    second = await asyncio.wait_for(anext(updates), 1)
    assert second.taken_at == 1000 and second.changed == {"h0", "h1"}
    waiting = asyncio.ensure_future(anext(updates))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # nothing new: it waits
    hub.publish(_snapshot(1001, {"h2"}))
    assert (await asyncio.wait_for(waiting, 1)).changed == {"h2"}
    hub.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(updates), 1)


def test_backoff_doubles_to_the_maximum_with_bounded_jitter() -> None:
    backoff = Backoff(1.0, 8.0, 0.2, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(6)]
    for delay, base in zip(delays, [1, 2, 4, 8, 8, 8], strict=True):
        assert base * 0.8 <= delay <= min(base * 1.2, 8.0)
    backoff.reset()
    assert backoff.next_delay() <= 1.2


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("monitor:\n  intervall: 2\n", 2, "did you mean 'interval'"),
        ("monitor:\n  interval: 0\n", 2, "at least 0.05"),
        ("ssh:\n  connect_timeout: soon\n", 2, "invalid ssh.connect_timeout"),
        ("health:\n  gpu_hot_c: 70\n  gpu_cool_c: 75\n", 1, "gpu_cool_c (75) must be below"),
        ("hooks:\n  commands:\n    - kinds: [gpu_hot]\n", 3, "hooks.commands[0] needs 'command'"),
        ("retention:\n  raw_days: [1]\n", 2, "must be a single value, not a list"),
        ("monitr: {}\n", 1, "did you mean 'monitor'"),
        ("monitor: [\n", 2, "YAML syntax error"),
        ("monitor:\n  interval: .nan\n", 2, "monitor.interval must be a finite number"),
        ("hooks:\n  timeout_s: .inf\n", 2, "hooks.timeout_s must be a finite number"),
        ("ssh:\n  connect_timeout: nan\n", 2, "a duration is a finite number of seconds"),
        ("idle:\n  after: 99999999d\n", 2, "longer than a century"),
    ],
)
def test_bad_settings_name_file_and_line(tmp_path: Path, text: str, line: int, words: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(None, path)
    assert caught.value.path == str(path) and caught.value.line == line
    assert words in str(caught.value)


def test_settings_file_values_durations_and_hooks(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "# comment\nmonitor:\n  interval: 500ms\n  reconnect_max: 2m\nhooks:\n  commands:\n"
        "    - command: [/usr/bin/logger, -t, fleet]\n      kinds: ['gpu_*']\n"
        "    - command: notify-send fleet\nretention:\n  rollup_days: null\n"
    )
    settings = load_settings(None, path)
    assert settings.monitor.interval == 0.5 and settings.monitor.reconnect_max == 120
    assert settings.hooks.commands[0].command == ("/usr/bin/logger", "-t", "fleet")
    assert settings.hooks.commands[1].command == "notify-send fleet"
    assert settings.retention.rollup_days is None
    assert settings.origins["monitor.interval"] == f"{path}:3"
    assert settings.ssh == default_settings().ssh


def test_missing_or_comment_only_file_gives_defaults(tmp_path: Path) -> None:
    assert load_settings(None, tmp_path / "absent.yaml").as_dict() == default_settings().as_dict()
    path = tmp_path / "config.yaml"
    path.write_text("# nothing yet\n")
    assert load_settings(None, path).files == (str(path),)


def test_a_settings_file_named_by_fleet_config_must_exist(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nonexist.yaml"
    monkeypatch.setenv("FLEET_CONFIG", str(missing))
    with pytest.raises(ConfigError, match="FLEET_CONFIG names a settings file that does not"
                       ) as caught:
        load_settings(None)
    assert caught.value.path == str(missing)
    monkeypatch.delenv("FLEET_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # the default path may be absent
    assert load_settings(None).as_dict() == default_settings().as_dict()
