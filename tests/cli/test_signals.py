"""`stop_on_signals`: the one SIGINT/SIGTERM handler of the long-running commands."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from fleet.cli.signals import stop_on_signals

CLI = Path(__file__).resolve().parents[2] / "fleet" / "cli"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
async def test_a_signal_sets_the_event_and_reports_each_one(signum: int) -> None:
    counts: list[int] = []
    async with stop_on_signals(counts.append) as stop:
        assert not stop.is_set()
        os.kill(os.getpid(), signum)
        await asyncio.wait_for(stop.wait(), 5)
        os.kill(os.getpid(), signum)
        for _ in range(100):
            if len(counts) == 2:
                break
            await asyncio.sleep(0.01)
    assert counts == [1, 2]


async def test_handlers_are_removed_afterwards_even_on_error() -> None:
    loop = asyncio.get_running_loop()
    with pytest.raises(RuntimeError):
        async with stop_on_signals():
            raise RuntimeError("boom")
    # remove_signal_handler answers False when no handler is installed.
    assert loop.remove_signal_handler(signal.SIGINT) is False
    assert loop.remove_signal_handler(signal.SIGTERM) is False


def test_no_command_installs_its_own_signal_handlers() -> None:
    installing = sorted(path.name for path in CLI.glob("*.py")
                        if "add_signal_handler" in path.read_text())
    assert installing == ["signals.py"]
