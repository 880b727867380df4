"""Records what a test-cluster run created, so teardown and stale-run cleanup act on facts."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

LOCK_TIMEOUT_S = 60.0


def state_base_dir() -> Path:
    """Where state files live: /run for root (gone after reboot), a per-user temp dir otherwise."""
    if os.geteuid() == 0:
        return Path("/run/fleet-test-cluster")
    return Path(tempfile.gettempdir()) / f"fleet-test-cluster-{os.getuid()}"


def new_run_id() -> str:
    """Six hex digits: short enough for 15-character interface names, unique enough per machine."""
    return secrets.token_hex(3)


def process_start_time(pid: int) -> int | None:
    """A live process's kernel start time (ticks since boot); None if gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields_after_name = stat[stat.rindex(")") + 2 :].split()
    state, start_time = fields_after_name[0], int(fields_after_name[19])
    if state in ("Z", "X"):
        return None
    return start_time


@dataclass
class RecordedProcess:
    """A process this tool started, known by PID and start time so a reused PID is never hit."""

    pid: int
    start_time: int
    role: str

    @classmethod
    def of(cls, pid: int, role: str) -> RecordedProcess:
        record = cls.if_running(pid, role)
        if record is None:
            raise RuntimeError(f"{role}: process {pid} exited right after it was started")
        return record

    @classmethod
    def if_running(cls, pid: int, role: str) -> RecordedProcess | None:
        """The record of a process still running, or None once it has exited (one told to stop
        may exit between a poll and this read: nothing is left to clean up)."""
        start_time = process_start_time(pid)
        return None if start_time is None else cls(pid=pid, start_time=start_time, role=role)

    def is_alive(self) -> bool:
        return process_start_time(self.pid) == self.start_time


@dataclass
class RunState:
    """Everything one run created; saved before each part is made, so a crash leaves a record."""

    run_id: str
    mode: str  # "netns" (root) or "local" (SimSshHost fallback)
    run_dir: str
    owner: RecordedProcess | None  # None: a detached CLI run, removed only by `down`
    bridge: str | None = None
    subnet_index: int | None = None
    namespaces: list[str] = field(default_factory=list)
    veths: list[str] = field(default_factory=list)
    processes: list[RecordedProcess] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return state_base_dir() / f"{self.run_id}.json"

    def save(self) -> None:
        base = state_base_dir()
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        temp_path = self.path.with_suffix(".tmp")
        temp_path.write_text(json.dumps(asdict(self), indent=1))
        os.replace(temp_path, self.path)

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)

    def is_stale(self) -> bool:
        """True when the process that owns this run is gone (a crashed or SIGKILLed run)."""
        return self.owner is not None and not self.owner.is_alive()

    @classmethod
    def load(cls, path: Path) -> RunState:
        raw = json.loads(path.read_text())
        owner = raw.pop("owner")
        processes = raw.pop("processes")
        return cls(
            **raw,
            owner=RecordedProcess(**owner) if owner else None,
            processes=[RecordedProcess(**process) for process in processes],
        )


def recorded_runs() -> list[RunState]:
    """All runs with a state file; unreadable files are reported, not skipped silently."""
    base = state_base_dir()
    if not base.is_dir():
        return []
    runs = []
    for path in sorted(base.glob("*.json")):
        try:
            runs.append(RunState.load(path))
        except FileNotFoundError:
            continue  # that run ended (another worker removed its state) since the listing
        except (ValueError, KeyError, TypeError) as exc:
            raise RuntimeError(
                f"{path}: unreadable test-cluster state file ({exc}); delete it"
            ) from exc
    return runs


@contextlib.contextmanager
def state_lock() -> Iterator[None]:
    """Serialises subnet choice and cleanup between concurrent runs on one machine."""
    base = state_base_dir()
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(base / "lock", "w") as lock_file:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{base / 'lock'}: held by another run for {LOCK_TIMEOUT_S} s"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
