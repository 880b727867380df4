"""Event hooks: JSON on stdin, filters, timeout kills the process group, failures, never blocks."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from fleet.health.hooks import HookCommand, HookRunner, HookSettings

EVENT = {"id": 1, "ts": 1.0, "kind": "gpu_hot", "severity": "warning", "host": "gpu01",
         "gpu_index": 3, "message": "gpu01 GPU 3: ok -> hot", "data": {"temperature_c": 91}}


def _copy_stdin_to(path: Path) -> tuple[str, ...]:
    code = ("import os, sys; data = sys.stdin.read(); "
            f"open({str(path)!r}, 'a').write(os.environ['FLEET_EVENT_KIND'] + ' ' + data)")
    return (sys.executable, "-c", code)


async def _wait_for(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_hook_receives_event_json_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    runner = HookRunner(HookSettings(commands=(HookCommand(_copy_stdin_to(out)),)))
    assert runner.submit(EVENT) == 1
    await runner.close(timeout_s=10)
    kind, payload = out.read_text().split(" ", 1)
    assert kind == "gpu_hot"
    assert json.loads(payload) == EVENT
    assert (runner.stats.succeeded, runner.stats.failed) == (1, 0)


async def test_shell_string_hook_and_filters(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    hooks = (
        HookCommand(f"cat >> {out}", kinds=("host_*",), name="hosts-only"),
        HookCommand(f"echo severe >> {out}", min_severity="error"),
    )
    runner = HookRunner(HookSettings(commands=hooks))
    assert runner.submit(EVENT) == 0  # gpu_hot is neither host_* nor error
    assert runner.submit({**EVENT, "kind": "host_down", "severity": "error"}) == 2
    await runner.close(timeout_s=10)
    lines = out.read_text().splitlines()
    assert sorted(line[:8] for line in lines) == ['severe', '{"id": 1']


async def test_timeout_kills_the_process_group_and_is_reported(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    # The hook starts a grandchild that would outlive a kill of the hook alone.
    command = f"sleep 30 & echo $! > {pid_file}; wait"
    failures: list[dict[str, object]] = []
    runner = HookRunner(HookSettings(commands=(HookCommand(command, timeout_s=2.0),)),
                        on_failure=failures.append)
    started = time.monotonic()
    runner.submit(EVENT)
    await _wait_for(lambda: failures)
    assert time.monotonic() - started < 15  # the grandchild sleeps 30 s: the timeout ended it
    (failure,) = failures
    assert failure["kind"] == "hook_failed"
    assert "timed out after 2s" in str(failure["message"])
    grandchild = int(pid_file.read_text())
    await _wait_for(lambda: not _alive(grandchild))
    await runner.close(timeout_s=1)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(("command", "reason"), [
    (("/bin/sh", "-c", "echo broken pipe dream >&2; exit 3"), "exited with status 3"),
    (("/nonexistent/fleet-hook",), "cannot start"),
])
async def test_failures_become_events(command: tuple[str, ...], reason: str) -> None:
    failures: list[dict[str, object]] = []
    runner = HookRunner(HookSettings(commands=(HookCommand(command),)),
                        on_failure=failures.append)
    runner.submit(EVENT)
    await runner.close(timeout_s=10)
    (failure,) = failures
    assert reason in str(failure["message"])
    assert failure["host"] == "gpu01" and failure["severity"] == "warning"
    data = failure["data"]
    assert isinstance(data, dict) and data["event_kind"] == "gpu_hot"
    if "status" in reason:
        assert "broken pipe dream" in str(failure["message"])
    # A hook_failed event never runs hooks again (no loops).
    assert runner.submit(failure) == 0


async def test_submit_never_blocks_and_overflow_is_counted(tmp_path: Path) -> None:
    settings = HookSettings(commands=(HookCommand("sleep 5"),), max_concurrent=1, queue_size=3,
                            timeout_s=10)
    runner = HookRunner(settings)
    queued = [runner.submit(EVENT) for _ in range(50)]
    assert runner.stats.started == 0  # submit only queues: nothing starts before the loop runs
    assert sum(queued) == 3
    assert runner.stats.dropped == 47
    closing = time.monotonic()
    await runner.close(timeout_s=0.3)
    assert time.monotonic() - closing < 5
    assert runner.stats.dropped >= 47 + 2  # queued ones dropped at close, the running one killed
    assert os.getpgid(os.getpid())  # our own group untouched


def test_hook_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="empty"):
        HookCommand("  ")
    with pytest.raises(ValueError, match="min_severity"):
        HookCommand("true", min_severity="loud")
    with pytest.raises(ValueError, match="max_concurrent"):
        HookSettings(max_concurrent=0)


def test_hook_kinds_match_case_insensitively_like_fleet_events() -> None:
    hook = HookCommand(("true",), kinds=("GPU_*", "Host_Down"))
    assert hook.wants(EVENT)
    assert hook.wants({**EVENT, "kind": "host_down"})
    assert not hook.wants({**EVENT, "kind": "host_up"})
