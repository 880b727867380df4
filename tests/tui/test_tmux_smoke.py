"""Smoke test of the real entry point in a real terminal: `fleet demo` inside tmux, driven with
keystrokes; the screen text is checked at each step and no process may be left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]
FLEET = Path(sys.executable).with_name("fleet")
STEP_DEADLINE_S = 60.0


class Tmux:
    """One private tmux server (its own socket) running one pane."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, text=True,
                              capture_output=True, timeout=10).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p")

    def keys(self, *keys: str) -> None:
        """Send keys one by one: an Escape followed at once by a letter would read as Alt+key."""
        for key in keys:
            self.run("send-keys", key)
            time.sleep(0.3)

    def wait_for(self, *texts: str, deadline_s: float = STEP_DEADLINE_S) -> str:
        """The screen once any of `texts` is on it; fails with the screen after the deadline."""
        deadline = time.monotonic() + deadline_s
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if any(text in screen for text in texts):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"none of {texts} on screen within {deadline_s}s:\n{screen}")


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Running and not a zombie (killed processes linger as zombies on this VM)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def task_processes(root: Path) -> set[int]:
    """Live processes running from a task directory of a demo under `root`."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(root) in command and "/.fleet/tasks/" in command and alive(int(entry.name)):
                found.add(int(entry.name))
    return found


def cmdline(pid: int) -> str:
    try:
        return f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return f"{pid}: gone"


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    session = Tmux(f"fleet-smoke-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        yield session
    finally:
        subprocess.run(["tmux", "-L", session.socket, "kill-server"], capture_output=True,
                       timeout=10, check=False)


def test_fleet_demo_in_a_real_terminal(tmux: Tmux, tmp_path: Path) -> None:
    env = f"env HOME={tmp_path} TERM=xterm-256color TMPDIR={tmp_path}"
    tmux.run("new-session", "-d", "-x", "120", "-y", "36", f"{env} {FLEET} demo")
    tmux.run("set-option", "-g", "remain-on-exit", "on")
    pane_pid = int(tmux.run("display-message", "-p", "#{pane_pid}").strip())

    screen = tmux.wait_for("8 up")
    for name in ("atlas", "boreas", "hydra", "fornax"):
        assert name in screen
    started = descendants(pane_pid) | {pane_pid}

    tmux.keys("Down", "Enter")  # boreas' detail
    screen = tmux.wait_for("GPU 2 ·")
    assert "boreas" in screen and "history: last 15 min" in screen and "util %" in screen

    tmux.keys("Escape", "t")
    # the screen's title can be drawn a frame before its table: wait for the table's header
    screen = tmux.wait_for("Elapsed")
    assert "Tasks —" in screen

    tmux.keys("d")
    tmux.wait_for("Dispatch a task")
    tmux.keys("Enter")
    screen = tmux.wait_for("would run on", "no placement possible", "not available")
    tmux.keys("C-s")
    screen = tmux.wait_for("dispatched task", "dispatch:")
    assert "dispatched task" in screen, screen
    screen = tmux.wait_for("log of task 1")  # the new task's log opens
    deadline = time.monotonic() + STEP_DEADLINE_S
    while time.monotonic() < deadline and not task_processes(tmp_path):
        time.sleep(0.2)
    tasks = task_processes(tmp_path)  # wrapper.sh and train.py: detached from the demo
    assert tasks, "the dispatched task never started"
    print(screen)

    tmux.keys("q")  # must cancel the running task, not orphan it
    deadline = time.monotonic() + STEP_DEADLINE_S
    while time.monotonic() < deadline and any(alive(pid) for pid in started | tasks):
        time.sleep(0.2)
    left = sorted(pid for pid in started | tasks if alive(pid))
    assert left == [], f"processes left after q: {[cmdline(pid) for pid in left]}"
    assert tmux.run("display-message", "-p", "#{pane_dead}").strip() == "1"
    assert not list(tmp_path.glob("fleet-demo-*")), "demo temp dir not removed"
