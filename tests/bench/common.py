"""Shared pieces of the benchmark suite: figures, timing, isolated fleet CLI env, peers, machine."""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
CACHE_DIR = ROOT / ".fleet-cache" / "bench"
FLEET_CLI = [sys.executable, "-m", "fleet.cli.main"]


@dataclass
class Measured:
    """One tool's samples for one figure (seconds unless the figure's unit says otherwise)."""

    label: str
    samples: list[float]
    note: str = ""
    # controller-side CPU seconds (user+sys of the process tree) per run, where measured
    cpu: list[float] = field(default_factory=list)

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu) if self.cpu else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


@dataclass
class Figure:
    """One row of the results table: fleet against its peers on the same work."""

    section: str
    name: str
    compares: str
    unit: str
    fleet: Measured | None
    peers: list[Measured] = field(default_factory=list)
    # other fleet measurements of the same work (e.g. the whole CLI process): no ratio
    extra: list[Measured] = field(default_factory=list)
    target: str = ""
    verdict: str = ""
    notes: list[str] = field(default_factory=list)
    # "lower" = smaller is better (times, CPU); "higher" = larger is better (rates)
    better: str = "lower"

    @property
    def runs(self) -> int:
        counts = [len(m.samples) for m in [self.fleet, *self.extra, *self.peers]
                  if m is not None]
        return max(counts) if counts else 0

    def ratios(self) -> dict[str, float]:
        """fleet median / peer median, per peer (for rates: peer / fleet, so >1 = fleet slower)."""
        out: dict[str, float] = {}
        if self.fleet is None or self.fleet.median is None:
            return out
        for peer in self.peers:
            if peer.median:
                if self.better == "lower":
                    out[peer.label] = self.fleet.median / peer.median
                elif self.fleet.median:
                    out[peer.label] = peer.median / self.fleet.median
        return out

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["runs"] = self.runs
        data["ratios"] = {k: round(v, 3) for k, v in self.ratios().items()}
        for measured in [data["fleet"], *data["extra"], *data["peers"]]:
            if measured is not None:
                samples = measured["samples"]
                measured["median"] = statistics.median(samples) if samples else None
        return data


@dataclass(frozen=True)
class HostProbeCpu:
    """CPU seconds a host spends per fan-out, each through `sh -c` as sshd runs it: the
    floor's `true`, the least any probe through the shipped pynvml pays (python3 -S with the
    bootstrap's and the binding's imports, nothing else), and fleet's whole probe."""

    floor_command: float
    binding_imports: float
    probe: float

    def ratio_estimate(self, floor_wall: float, hosts: int, cores: int, per_host: float
                       ) -> float:
        """The fan-out ÷ floor ratio that host CPU alone implies when every host shares the
        same `cores`: the floor's wall plus each host's extra CPU over the floor's command,
        spread over the cores, with nothing added by the controller. An estimate, not a
        bound: it assumes the floor's run leaves no core idle (it keeps them busy, not
        saturated, so some of the extra could hide in its idle time)."""
        extra = hosts * max(0.0, per_host - self.floor_command) / cores
        return (floor_wall + extra) / floor_wall


@dataclass
class Results:
    """Everything one run of the suite produced: figures, skipped parts and why."""

    figures: list[Figure] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    host_probe_cpu: HostProbeCpu | None = None  # set by the start-up section's host probe cost

    def skip(self, what: str, why: str) -> None:
        print(f"[bench] SKIPPED {what}: {why}", flush=True)
        self.skipped.append((what, why))

    def add(self, figure: Figure) -> None:
        fleet = figure.fleet.median if figure.fleet else None
        peers = ", ".join(f"{p.label}={p.median:.4g}" for p in figure.peers if p.median)
        print(f"[bench] {figure.name}: fleet={fleet if fleet is None else f'{fleet:.4g}'} "
              f"{figure.unit}; {peers}", flush=True)
        self.figures.append(figure)


def compile_bytecode() -> str:
    """Byte-compile fleet's packages (what pip does at install), so that client processes load
    .pyc files as an installed fleet does; a note for the figures that says so.

    With PYTHONDONTWRITEBYTECODE set (these lab machines set it) Python never writes .pyc, and
    every fleet process compiled each module edited since the last write from source (in a
    fresh clone: all of them), 0.1-0.15 s of CPU per process on this box. `python -m tests.bench`
    calls this once before its sections.
    """
    for package in ("db", "fleet", "tui"):
        compileall.compile_dir(ROOT / package, quiet=1)
    unset = "PYTHONDONTWRITEBYTECODE" not in os.environ
    return ("fleet's packages byte-compiled before the rounds (as pip does at install"
            + ("" if unset else "; PYTHONDONTWRITEBYTECODE is set here, so Python writes none "
                             "itself") + ")")


def log(message: str) -> None:
    print(f"[bench] {message}", flush=True)


def measure_command(label: str, argv: Sequence[str], *, runs: int, note: str = "",
                    env: dict[str, str] | None = None, cwd: Path | None = None,
                    timeout: float = 300, warmup: int = 1,
                    check: Callable[[subprocess.CompletedProcess[bytes]], str | None] | None = None,
                    ) -> Measured:
    """Wall seconds and CPU seconds (the process and its children) of `runs` whole-process runs,
    after `warmup` untimed ones. `check` returns an error text for a wrong run (RuntimeError)."""
    walls, cpus = [], []
    for index in range(warmup + runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(list(argv), env=env, cwd=cwd, capture_output=True, timeout=timeout,
                              check=False)
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        problem = check(done) if check else (
            None if done.returncode == 0 else f"exit {done.returncode}")
        if problem:
            raise RuntimeError(f"{' '.join(map(str, argv))[:200]}: {problem}: "
                               f"{done.stderr.decode(errors='replace')[-1500:]}"
                               f"{done.stdout.decode(errors='replace')[-500:]}")
        if index >= warmup:
            walls.append(elapsed)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return Measured(label, walls, note=note, cpu=cpus)


def time_command(argv: Sequence[str], *, runs: int, **kwargs: Any) -> list[float]:
    """Wall seconds of `runs` whole-process runs (see measure_command)."""
    return measure_command("", argv, runs=runs, **kwargs).samples


def fleet_env(home: Path, db_path: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a fleet CLI process with its own HOME/XDG dirs and database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "XDG_"))}
    env.update({
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "FLEET_DB": str(db_path),
        "FLEET_SERVER": "local",  # a `fleet serve` on the default socket must not answer
        "PYTHONPATH": str(ROOT),
    })
    env.update(extra or {})
    return env


def trust_known_hosts(home: Path, known_hosts: Path) -> None:
    """Puts the cluster's host keys where fleet and ssh look by default (~/.ssh/known_hosts)."""
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copy(known_hosts, ssh_dir / "known_hosts")


def have_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def peer_binary(name: str) -> str | None:
    """A peer's executable: the venv's first (pip-installed peers), then PATH."""
    candidate = VENV_BIN / name
    if candidate.exists():
        return str(candidate)
    return shutil.which(name)


def cpu_seconds_of(pid: int) -> float:
    """CPU time of a process (all its threads, ended ones included), from its CPU-time clock
    (nanoseconds); /proc/PID/stat's utime + stime count whole clock ticks (10 ms), which is
    0.03 ms per host-sample over a 20 s window at 16 hosts. The stat fields where the clock
    cannot be read."""
    try:
        return time.clock_gettime(process_cpu_clock(pid))
    except OSError:  # not Linux, or the process is gone (the stat file then says so)
        return stat_cpu_seconds_of(pid)


def stat_cpu_seconds_of(pid: int) -> float:
    """utime + stime of a process, from /proc/PID/stat (whole clock ticks)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_clock(pid: int) -> int:
    """The clock id of a process's CPU-time clock, as clock_getcpuclockid(3) makes it on Linux
    (CPUCLOCK_SCHED of the whole process)."""
    return ((~pid) << 3) | 2


def rss_bytes_of(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def load_average() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return (round(one, 2), round(five, 2), round(fifteen, 2))


def machine() -> dict[str, Any]:
    """nproc, CPU model, kernel, Python, load average: printed with every table."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass  # no /proc/cpuinfo: the model is reported as "unknown"
    memory = ""
    try:
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        memory = f"{int(first.split()[1]) // 1024 // 1024} GiB"
    except (OSError, IndexError, ValueError):
        pass  # no readable /proc/meminfo: the memory is left out of the report
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "memory": memory,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "is_root": os.geteuid() == 0,
    }


def package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def in_turns(names: Sequence[str], rounds: int, measure: Callable[[str], float],
             unit: str) -> dict[str, list[float]]:
    """`measure(name)` for every name, `rounds` times, in ABBA order (so the box's drift hits
    each alike); prints each figure as it comes ("round R: NAME: VALUE UNIT")."""
    taken: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(rounds):
        for name in names if round_number % 2 == 0 else list(names)[::-1]:
            taken[name].append(measure(name))
            print(f"round {round_number}: {name}: {taken[name][-1]:.4g} {unit}", flush=True)
    return taken


def host_counts(text: str) -> list[int]:
    """`--hosts 16,32,64`: sorted distinct positive host counts."""
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of host counts: {text!r}") from exc
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"host counts must be >= 1: {text!r}")
    return counts
