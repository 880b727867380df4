"""Figure 4: the CLI through a running `fleet serve` (dispatch, status, tasks) vs local mode."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.bench_dispatch import SCRIPT, _printed_hello
from tests.bench.common import (
    FLEET_CLI,
    Figure,
    Measured,
    Results,
    compile_bytecode,
    cpu_seconds_of,
    fleet_env,
    log,
    measure_command,
)
from tests.bench.lab import HostSet

# AF_UNIX paths (with their NUL) must fit in sun_path's 108 bytes
MAX_SOCKET_PATH = 107
STOP_GRACE_S = 20.0
KILL_WAIT_S = 5.0


@dataclass
class Command:
    """One command of an interleaved comparison: a label, argv and measure_command options."""

    label: str
    argv: list[str]
    options: dict[str, Any] = field(default_factory=dict)


def interleaved(commands: Sequence[Command], runs: int, warmup: int = 1) -> list[Measured]:
    """Runs the commands in rounds (rotating who goes first), so that load changes on a shared
    box hit each of them alike; `warmup` untimed rounds first. One Measured per command."""
    measured = [Measured(c.label, [], note=c.options.get("note", "")) for c in commands]
    for index in range(warmup + runs):
        shift = index % len(commands)
        for position in [*range(shift, len(commands)), *range(shift)]:
            command = commands[position]
            options = {k: v for k, v in command.options.items() if k != "note"}
            one = measure_command(command.label, command.argv, runs=1, warmup=0, **options)
            if index >= warmup:
                measured[position].samples.extend(one.samples)
                measured[position].cpu.extend(one.cpu)
    return measured


def _status_ok(done: subprocess.CompletedProcess[bytes], count: int) -> str | None:
    if done.returncode != 0:
        return f"exit {done.returncode}"
    try:
        hosts = json.loads(done.stdout)["hosts"]
    except (ValueError, KeyError, TypeError) as exc:
        return f"not a status document: {exc}"
    up = [h for h in hosts if h.get("state") == "up" and h.get("gpus")]
    return None if len(up) == count else f"only {len(up)}/{count} hosts up with GPUs"


def _socket_path(workdir: Path) -> Path:
    path = workdir / "fleet.sock"
    if len(str(path).encode()) <= MAX_SOCKET_PATH:
        return path
    return Path(tempfile.mkdtemp(prefix="fb-", dir="/tmp")) / "fleet.sock"


class Server:
    """A `fleet serve` subprocess over a HostSet's inventory, database and HOME; stopped by its
    own PID (SIGTERM, then SIGKILL after a bounded wait)."""

    def __init__(self, host_set: HostSet) -> None:
        self.host_set = host_set
        self.socket = _socket_path(host_set.workdir)
        self.log_path = host_set.workdir / "serve.log"
        self.env = fleet_env(host_set.home, host_set.db_path)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def client(self, *args: str) -> list[str]:
        """argv of a fleet CLI process that goes through this server."""
        return [*FLEET_CLI, "--server", str(self.socket), *args]

    def start(self, timeout: float) -> float:
        """Starts the server and waits (at most `timeout` s) until `fleet --server SOCK status`
        shows every host up with GPUs; the seconds that took."""
        started = time.monotonic()
        with open(self.log_path, "wb") as log_file:
            self.process = subprocess.Popen(
                [*FLEET_CLI, "--inventory", str(self.host_set.fleet_inventory), "serve",
                 "--socket", str(self.socket)],
                env=self.env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                start_new_session=True)
        (self.host_set.workdir / "serve.pid").write_text(f"{self.process.pid}\n")
        deadline = started + timeout
        problem = "not started"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"fleet serve exited {self.process.returncode}: "
                                   f"{self.log_tail()}")
            if self.socket.exists():
                done = subprocess.run(self.client("--json", "status"), env=self.env,
                                      capture_output=True, timeout=30, check=False)
                problem = _status_ok(done, self.host_set.count) or ""
                if not problem:
                    return time.monotonic() - started
                if done.returncode != 0:
                    problem += f": {done.stderr.decode(errors='replace')[-300:]}"
            time.sleep(0.5)
        raise RuntimeError(f"fleet serve not ready in {timeout:.0f} s ({problem}): "
                           f"{self.log_tail()}")

    def cpu(self) -> float:
        return cpu_seconds_of(self.pid)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_bytes()[-1500:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM to the recorded PID; SIGKILL if it has not exited within STOP_GRACE_S."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            log(f"fleet serve (pid {process.pid}) still running {STOP_GRACE_S:.0f} s after "
                "SIGTERM: SIGKILL")
            process.kill()
            process.wait(timeout=KILL_WAIT_S)


def _server_cpu_note(server: Server, cpu_before: float, wall_before: float) -> str:
    cpu = server.cpu() - cpu_before
    wall = time.monotonic() - wall_before
    return (f"the server process used {cpu:.2f} s CPU over these {wall:.0f} s of runs "
            f"({100 * cpu / wall:.0f} % of a core; its monitor reads "
            f"{server.host_set.count} host(s) every second meanwhile), not in the clients' CPU")


def serve_dispatch(results: Results, host_set: HostSet, runs: int) -> None:
    """`fleet --server SOCK dispatch hello.py` vs local `fleet dispatch` vs scp + ssh, one host;
    then `fleet --server SOCK tasks` vs local `fleet tasks` on the tasks those runs recorded."""
    host = host_set.names[0]
    script = host_set.workdir / "hello.py"
    script.write_text(SCRIPT)
    inventory = str(host_set.fleet_inventory)
    local_env = fleet_env(host_set.home, host_set.db_path, {"FLEET_SERVER": "local"})
    compiled = compile_bytecode()
    server = Server(host_set)
    try:
        ready = server.start(timeout=90)
        log(f"fleet serve (pid {server.pid}) ready on {server.socket} in {ready:.1f} s; "
            f"dispatch to {host}, {runs} interleaved rounds")
        _first_dispatch(server, script, timeout=30)
        config = shlex.quote(str(host_set.lab.ssh_config_file))
        remote = f"/tmp/bench-serve-{host}.py"
        cpu_before, wall_before = server.cpu(), time.monotonic()
        through, local, scp_ssh = interleaved([
            Command("fleet --server dispatch", server.client("dispatch", str(script)),
                    {"env": server.env, "check": _printed_hello,
                     "note": "client process: read the script, POST /v1/tasks on the socket, "
                             "stream the output events; the server places, claims, uploads "
                             "over its open SSH connection, starts, records, releases"}),
            Command("fleet dispatch (local)",
                    [*FLEET_CLI, "--inventory", inventory, "dispatch", str(script)],
                    {"env": local_env, "check": _printed_hello,
                     "note": "FLEET_SERVER=local: the whole dispatch in one CLI process "
                             "(new SSH connection), while the server runs"}),
            Command("scp + ssh python3",
                    ["sh", "-c",
                     f"scp -q -F {config} {shlex.quote(str(script))} {host}:{remote} && "
                     f"ssh -F {config} -n {host} python3 {remote}"],
                    {"check": _printed_hello,
                     "note": "two OpenSSH connections (curve25519), no placement, no record"}),
        ], runs)
        figure = Figure(
            section="serve", name="dispatch a trivial script through fleet serve, 1 host",
            unit="s",
            compares="wall time from command start to the script's output and exit, one host; "
                     "the three interleaved, round by round, while the server runs",
            fleet=through, peers=[scp_ssh, local], target="≤ 1.5× scp + ssh",
            notes=[_server_cpu_note(server, cpu_before, wall_before), compiled])
        ratio = figure.ratios().get(scp_ssh.label)
        if ratio is not None:
            figure.verdict = (f"{ratio:.2f}× scp+ssh "
                              f"({'meets' if ratio <= 1.5 else 'misses'} ≤1.5×)")
        results.add(figure)
        _tasks(results, server, inventory, local_env, runs, compiled)
    finally:
        server.stop()


def _first_dispatch(server: Server, script: Path, timeout: float) -> None:
    """Dispatch through the server until one succeeds (at most `timeout` s): a server just
    started shows its hosts' GPUs in its snapshot a moment before its database has recorded
    them, and a claim in that moment fails ("has no GPU [1] in the database")."""
    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run(server.client("dispatch", str(script)), env=server.env,
                              capture_output=True, timeout=60, check=False)
        if done.returncode == 0:
            return
        if time.monotonic() >= deadline:
            raise RuntimeError(f"no dispatch through fleet serve succeeded in {timeout:.0f} s: "
                               f"exit {done.returncode}: {done.stderr.decode()[-300:]}")
        time.sleep(0.5)


def _tasks(results: Results, server: Server, inventory: str, local_env: dict[str, str],
           runs: int, compiled: str) -> None:
    recorded = subprocess.run(server.client("--json", "tasks"), env=server.env,
                              capture_output=True, timeout=60, check=True)
    count = _task_count(recorded.stdout)
    log(f"tasks: {count} recorded, {runs} interleaved rounds")
    cpu_before, wall_before = server.cpu(), time.monotonic()
    through, local, floor = interleaved([
        Command("fleet --server tasks", server.client("tasks"),
                {"env": server.env, "note": "client process: GET /v1/tasks on the socket"}),
        Command("fleet tasks (local)", [*FLEET_CLI, "--inventory", inventory, "tasks"],
                {"env": local_env, "note": "FLEET_SERVER=local: open the SQLite database, "
                                           "reconcile, list"}),
        Command("python -c pass", [sys.executable, "-c", "pass"]),
    ], runs)
    figure = Figure(
        section="serve", name="fleet tasks through fleet serve", unit="s",
        compares=f"whole client process listing the same {count} recorded tasks; interleaved",
        fleet=through, peers=[local, floor], target="faster than local mode",
        notes=[_server_cpu_note(server, cpu_before, wall_before), compiled])
    ratio = figure.ratios().get(local.label)
    if ratio is not None:
        figure.verdict = _versus(ratio, "local `fleet tasks`")
    results.add(figure)


def _versus(ratio: float, local: str) -> str:
    """Verdict against the target "faster than local mode" (within 5 %: on par, which misses)."""
    if ratio < 0.95:
        return f"{1 / ratio:.1f}× faster than {local} (meets)"
    if ratio <= 1.05:
        return f"on par with {local}, {ratio:.2f}× (misses)"
    return f"{ratio:.2f}× {local}, slower (misses)"


def _task_count(stdout: bytes) -> int:
    data = json.loads(stdout)
    if isinstance(data, dict):
        data = data.get("tasks", [])
    return len(data)


def serve_status(results: Results, host_set: HostSet, runs: int) -> None:
    """`fleet --server SOCK status` (the server's live snapshot) vs a fresh local `fleet status`
    fan-out over the same hosts (FLEET_SERVER=local), while the server monitors them."""
    count = host_set.count
    inventory = str(host_set.fleet_inventory)
    local_env = fleet_env(host_set.home, host_set.db_path, {"FLEET_SERVER": "local"})
    compiled = compile_bytecode()
    server = Server(host_set)
    try:
        ready = server.start(timeout=60 + 2 * count)
        log(f"fleet serve (pid {server.pid}) ready on {server.socket} in {ready:.1f} s "
            f"with {count} hosts up; status, {runs} interleaved rounds")
        cpu_before, wall_before = server.cpu(), time.monotonic()
        through, local, floor = interleaved([
            Command("fleet --server status", server.client("--json", "status"),
                    {"env": server.env, "check": lambda done: _status_ok(done, count),
                     "note": "client process: GET /v1/status, the server's live snapshot "
                             "(no new probe)"}),
            Command("fleet status (local)",
                    [*FLEET_CLI, "--json", "--inventory", inventory, "status",
                     "--timeout", "30s"],
                    {"env": local_env, "check": lambda done: _status_ok(done, count),
                     "note": "FLEET_SERVER=local: new SSH connections, full GPU + host probe, "
                             "record; while the server's monitor runs on the same hosts"}),
            Command("python -c pass", [sys.executable, "-c", "pass"]),
        ], runs)
        figure = Figure(
            section="serve", name=f"fleet status through fleet serve, {count} hosts", unit="s",
            compares=f"whole client process reporting all {count} hosts up; the server "
                     "answers from its snapshot, local mode probes afresh; interleaved",
            fleet=through, peers=[local, floor], target="faster than a local fan-out",
            notes=[_server_cpu_note(server, cpu_before, wall_before), compiled])
        ratio = figure.ratios().get(local.label)
        if ratio is not None:
            figure.verdict = _versus(ratio, "a local fan-out")
        results.add(figure)
    finally:
        server.stop()
