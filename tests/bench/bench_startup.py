"""Figure 3b: CLI start-up: `fleet --help` and `fleet tasks` against a bare Python and Ansible."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.bench.common import (
    FLEET_CLI,
    Figure,
    Measured,
    Results,
    fleet_env,
    log,
    measure_command,
    peer_binary,
)


def startup(results: Results, workdir: Path, runs: int) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    env = fleet_env(workdir, workdir / "fleet.db")
    log(f"start-up, {runs} runs each")
    baseline = measure_command("python -c pass", [sys.executable, "-c", "pass"], runs=runs)
    ansible = peer_binary("ansible")
    peers = [baseline]
    if ansible:
        peers.append(measure_command("ansible --version", [ansible, "--version"], runs=runs))
    else:
        results.skip("start-up: ansible --version", "ansible not installed")
    help_figure = Figure(
        section="start-up", name="fleet --help", unit="s",
        compares="whole process: interpreter start + CLI imports + help text",
        fleet=measure_command("fleet --help", [*FLEET_CLI, "--help"], runs=runs, env=env),
        peers=peers, target="fast (no asyncssh/sqlalchemy/textual import)")
    results.add(help_figure)
    # the warm-up run creates and migrates the database
    tasks = measure_command("fleet tasks", [*FLEET_CLI, "tasks"], runs=runs, env=env)
    history = measure_command("fleet history gpus", [*FLEET_CLI, "history", "gpus"], runs=runs,
                              env=env)
    help_run = help_figure.fleet
    assert help_run is not None
    # what any command on fleet's stack pays before its own work: the CLI's imports (as --help)
    # plus SQLAlchemy's ORM and sqlite3, nothing mapped, nothing opened
    orm_floor = measure_command(
        "floor: CLI + SQLAlchemy ORM imports",
        [sys.executable, "-c", "import fleet.cli.main, sqlalchemy.orm, sqlite3"], runs=runs,
        note="import fleet.cli.main, sqlalchemy.orm, sqlite3: no model mapped, no DB opened")
    for name, measured, what in (
            ("fleet tasks (empty DB)", tasks, "open + check the migrated SQLite DB, list tasks"),
            ("fleet history gpus (empty DB)", history,
             "open + check the migrated SQLite DB, the last hour of GPU history")):
        figure = Figure(
            section="start-up", name=name, unit="s", compares=f"whole process, local mode: {what}",
            fleet=measured, peers=[Measured("fleet --help", help_run.samples, cpu=help_run.cpu),
                                   orm_floor, baseline],
            target="≤ 3× fleet --help")
        figure.verdict = _cold_verdict(figure.ratios(), help_run, orm_floor)
        results.add(figure)


def _cold_verdict(ratios: dict[str, float], help_run: Measured, orm_floor: Measured) -> str:
    """The ratio to --help, and how much of it the ORM floor already takes."""
    ratio = ratios.get("fleet --help")
    if ratio is None:
        return ""
    verdict = f"{ratio:.2f}× fleet --help ({'meets' if ratio <= 3 else 'misses'} ≤3×)"
    floor_ratio = ratios.get(orm_floor.label)
    if floor_ratio is not None and orm_floor.median and help_run.median:
        verdict += (f"; {floor_ratio:.2f}× the floor, which alone is "
                    f"{orm_floor.median / help_run.median:.2f}× --help")
    return verdict


def host_probe_cost(results: Results, workdir: Path, runs: int) -> None:
    """What one probe costs on a host: the once-probe program run by Debian's python3 against
    the simulated libnvidia-ml (8 GPUs), vs `python3 -c pass` and `true` (what peers run)."""
    import os
    import shutil

    from fleet.probe.bundle import probe_command, probe_program
    from fleet.sim import gpus as scenarios
    from fleet.sim.build import build_sim_tools
    from fleet.sim.gpus import write_config
    from tests.bench.common import ROOT

    python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    tools = build_sim_tools(ROOT / ".fleet-cache" / "sim")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "gpus.conf"
    write_config(config, scenarios.mixed(8, host="bench"))
    cache = workdir / "xdg-cache"
    env = {**os.environ, **tools.env(config), "XDG_CACHE_HOME": str(cache)}
    program = workdir / "probe.bin"
    program.write_bytes(probe_program("once", None))
    argv = ["sh", "-c", f"{probe_command(python)} < {program}"]
    cold = []
    for _ in range(max(2, runs // 2)):  # a host's first probe: nothing cached yet
        shutil.rmtree(cache, ignore_errors=True)
        cold.extend(measure_command("", argv, runs=1, env=env, warmup=0).cpu)
    probe = measure_command(
        "probe program (once, 8 GPUs)", argv, runs=runs, env=env,
        note=f"{python}: decompress, load the shipped pynvml (compiled code cached on the host "
             "if the bundle does so) and probe; ≥ 0.1 s by design (CPU busy % window)")
    peers = [measure_command("python3 -c pass", [python, "-c", "pass"], runs=runs),
             measure_command("true", ["true"], runs=runs)]
    figure = Figure(
        section="fan-out", name="one probe on a host (host-side cost)", unit="s",
        compares="wall and CPU of the remote side of one probe, run locally with the host's "
                 "python3, vs what the peers run remotely; in the namespace lab all hosts "
                 "share these 2 cores, so host CPU adds up across a fan-out",
        fleet=probe, peers=peers)
    cpu = probe.cpu_median or 0.0
    cold_cpu = sorted(cold)[len(cold) // 2]
    figure.verdict = (f"{1000 * cpu:.0f} ms CPU per probe per host; a host's first probe "
                      f"(empty cache): {1000 * cold_cpu:.0f} ms")
    results.add(figure)
