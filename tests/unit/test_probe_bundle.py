"""Building the probe program and its command line; streaming mode's lifetime rules."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fleet.probe import remote_cli
from fleet.probe.bundle import (
    BOOTSTRAP,
    PYTHON_TOO_OLD_EXIT,
    BundleError,
    payload_source,
    probe_arguments,
    probe_command,
    probe_program,
    pynvml_source_path,
    shipped_pynvml_source,
)
from fleet.probe.parse import parse_probe_line
from fleet.sim import gpus as sim
from fleet.sim.gpus import write_config

SimHost = Callable[..., tuple[Path, dict[str, str]]]
StartStream = Callable[..., subprocess.Popen[bytes]]
PYTHON27 = str(Path.home() / ".pyenv/versions/2.7.18/bin/python2.7")


class LineReader:
    """Reads whole lines from a pipe with a deadline per line (no unbounded blocking)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self.fd = process.stdout.fileno()
        self.buffer = b""

    def line(self, timeout: float) -> bytes | None:
        """The next line, or None at end of file; fails the test past the deadline."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no line within {timeout}s"
            readable, _, _ = select.select([self.fd], [], [], remaining)
            if readable:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    return None
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


@pytest.fixture
def start_stream() -> Iterator[StartStream]:
    """Starts streaming probes on this machine's venv python; kills leftovers afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def start(
        env: dict[str, str], interval: float, max_samples: int | None = None
    ) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            probe_command(sys.executable),
            shell=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        started.append(process)
        assert process.stdin is not None
        process.stdin.write(probe_program("stream", interval, "~/.fleet/tasks", max_samples))
        process.stdin.flush()  # stdin stays open: the probe runs until it closes
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


def test_program_is_compressed_and_cached() -> None:
    program = probe_program("once", None, "~/.fleet/tasks")
    length_line, payload = program.split(b"\n", 1)
    assert int(length_line) == len(payload)
    source = zlib.decompress(payload).decode()
    assert source == payload_source(["--once", "--tasks-dir", "~/.fleet/tasks"])
    assert len(payload) * 3 < len(source)
    assert shipped_pynvml_source() in source  # trimmed: tests/unit/test_probe_trim.py
    assert pynvml_source_path().stat().st_size > 4 * len(source)
    assert probe_program("once", None, "~/.fleet/tasks") is program


@pytest.mark.parametrize(
    ("mode", "interval", "max_samples", "message"),
    [
        ("once", 1.0, None, "takes no interval"),
        ("stream", None, None, "needs an interval"),
        ("stream", 0.0, None, "needs an interval"),
        ("stream", -1.0, None, "needs an interval"),
        ("stream", 1.0, 0, "max_samples"),
        ("watch", None, None, "unknown probe mode"),
    ],
)
def test_bad_arguments_are_refused(
    mode: str, interval: float | None, max_samples: int | None, message: str
) -> None:
    with pytest.raises(BundleError, match=message):
        probe_arguments(mode, interval, "~/.fleet/tasks", max_samples)


def test_arguments_travel_inside_the_program_not_on_the_command_line() -> None:
    hostile = "/tmp/x'; rm -rf / #"
    assert hostile in payload_source(probe_arguments("once", None, hostile))
    assert hostile not in probe_command("python3")
    assert probe_command("python3").startswith("exec python3 -S -c ")


def test_interpreter_path_is_quoted(tmp_path: Path, sim_host: SimHost) -> None:
    odd_dir = tmp_path / "it's a dir; $(touch pwned)"
    odd_dir.mkdir()
    python = odd_dir / "python3"
    python.symlink_to(sys.executable)
    _, env = sim_host(sim.idle(1))
    completed = subprocess.run(
        probe_command(str(python)),
        shell=True,
        cwd=tmp_path,
        input=probe_program("once", None, "~/.fleet/tasks"),
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert len(parse_probe_line(completed.stdout, "h").gpus) == 1
    assert not (tmp_path / "pwned").exists()


@pytest.mark.skipif(not os.path.exists(PYTHON27), reason="no Python 2.7 interpreter here")
def test_too_old_python_exits_with_its_own_status() -> None:
    completed = subprocess.run(
        probe_command(PYTHON27),
        shell=True,
        input=probe_program("once", None, "~/.fleet/tasks"),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == PYTHON_TOO_OLD_EXIT
    assert b"needs python>=3.6, this is 2.7" in completed.stderr
    assert completed.stdout == b""


def test_stream_emits_max_samples_lines_then_exits(
    sim_host: SimHost, start_stream: StartStream
) -> None:
    _, env = sim_host(sim.idle(2))
    process = start_stream(env, 0.05, max_samples=3)
    reader = LineReader(process)
    reports = [parse_probe_line(reader.line(10) or b"", "h") for _ in range(3)]
    assert reader.line(10) is None
    assert process.wait(timeout=10) == 0
    assert all(len(report.gpus) == 2 for report in reports)
    stamps = [report.timestamp for report in reports]
    assert stamps == sorted(stamps) and stamps[2] - stamps[0] >= 0.09
    assert all(report.host.cpu_busy_pct is not None for report in reports)


def test_stream_follows_live_changes_and_stops_on_stdin_eof(
    sim_host: SimHost,
    start_stream: StartStream,
) -> None:
    scenario = sim.idle(2)
    config_path, env = sim_host(scenario)
    process = start_stream(env, 0.1)
    reader = LineReader(process)
    first = parse_probe_line(reader.line(10) or b"", "h")
    assert first.gpus[1].temperature_c == scenario.gpus[1].temperature_c
    scenario.gpus[1].temperature_c = 91
    write_config(config_path, scenario)
    deadline = time.monotonic() + 10
    while True:  # bounded by the deadline and by the reader's own per-line timeout
        report = parse_probe_line(reader.line(10) or b"", "h")
        if report.gpus[1].temperature_c == 91:
            break
        assert time.monotonic() < deadline, "the stream never showed the new temperature"
    assert process.stdin is not None
    closed_at = time.monotonic()
    process.stdin.close()
    # At 0.1 s a line, a probe that ignored the EOF would still be writing after 50 lines.
    late_lines = 0
    while reader.line(10) is not None:
        late_lines += 1
        assert late_lines < 50, "the probe went on after its stdin closed"
    assert process.wait(timeout=10) == 0
    assert time.monotonic() - closed_at < 5.0
    assert process.stderr is not None
    assert b"stdin closed" in process.stderr.read()


def test_stream_stops_cleanly_on_sigterm(sim_host: SimHost, start_stream: StartStream) -> None:
    _, env = sim_host(sim.idle(1))
    process = start_stream(env, 0.1)
    reader = LineReader(process)
    assert reader.line(10) is not None
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
    assert process.stderr is not None
    assert b"Traceback" not in process.stderr.read()


def test_stream_exits_quietly_when_its_reader_goes_away(
    sim_host: SimHost, start_stream: StartStream
) -> None:
    _, env = sim_host(sim.idle(1))
    process = start_stream(env, 0.05)
    reader = LineReader(process)
    assert reader.line(10) is not None
    assert process.stdout is not None
    process.stdout.close()  # like a dropped SSH channel: the next write gets EPIPE
    assert process.wait(timeout=10) == 0
    assert process.stderr is not None
    assert b"Traceback" not in process.stderr.read()


def test_probe_exits_without_the_interpreters_teardown(sim_host: SimHost) -> None:
    # An atexit handler runs in a normal interpreter exit; the probe ends with os._exit once its
    # output is flushed (fleet_probe_cli.exit_now), so the handler never runs and the line is whole.
    _, env = sim_host(sim.idle(2))
    watched = ("import atexit,sys;atexit.register(lambda: sys.stderr.write('teardown ran\\n'));"
               + BOOTSTRAP)
    completed = subprocess.run(
        [sys.executable, "-S", "-c", watched], input=probe_program("once", None, "~/.fleet/tasks"),
        capture_output=True, env=env, timeout=60, check=False)
    assert completed.returncode == 0, completed.stderr
    assert b"teardown ran" not in completed.stderr
    assert len(parse_probe_line(completed.stdout, "h").gpus) == 2


def test_exit_now_reports_output_it_could_not_flush_as_python_does() -> None:
    # Python itself exits 120 when flushing its output fails at exit; exit_now keeps that.
    script = ("import sys;sys.path.insert(0, sys.argv[1]);import remote_cli;"
              "sys.stdout.write('x' * 100);sys.stderr.write('buffered\\n');sys.stdin.read();"
              "remote_cli.exit_now(0)")
    probe_dir = str(Path(remote_cli.__file__).parent)  # remote_cli as shipped: stdlib only
    buffered_env = {name: value for name, value in os.environ.items()
                    if name != "PYTHONUNBUFFERED"}  # stdout keeps the line until exit_now
    process = subprocess.Popen([sys.executable, "-S", "-c", script, probe_dir],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=buffered_env)
    assert process.stdout is not None and process.stdin is not None
    assert process.stderr is not None
    ready, _, _ = select.select([process.stderr], [], [], 30)
    assert ready and process.stderr.readline() == b"buffered\n"
    process.stdout.close()  # the reader goes away before the probe flushes
    process.stdin.close()
    assert process.wait(timeout=30) == 120
    assert b"Traceback" not in process.stderr.read()
    process.stderr.close()
