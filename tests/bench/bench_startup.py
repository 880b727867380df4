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
    help_run = help_figure.fleet
    assert help_run is not None
    # What a read through SQLAlchemy's ORM would pay before its own work: the CLI's imports
    # (as --help) plus SQLAlchemy's ORM and sqlite3, nothing mapped, nothing opened. Local
    # reads of an SQLite file no longer import SQLAlchemy (db.sql): this shows what that saves.
    orm_floor = measure_command(
        "CLI + SQLAlchemy ORM imports",
        [sys.executable, "-c", "import fleet.cli.main, sqlalchemy.orm, sqlite3"], runs=runs,
        note="import fleet.cli.main, sqlalchemy.orm, sqlite3: no model mapped, no DB opened")
    lab_env = fleet_env(workdir, seed_lab_database(workdir / "lab.db"))
    end = str(LAB_END_S)
    # the warm-up run of each creates and migrates its database where it is new
    commands = [
        ("fleet tasks (empty DB)", ["tasks"], env,
         "open + check the migrated SQLite DB, list tasks"),
        ("fleet history gpus (empty DB)", ["history", "gpus"], env,
         "open + check the migrated SQLite DB, the last hour of GPU history"),
        ("fleet tasks (lab DB)", ["tasks"], lab_env,
         f"{LAB_TASKS} tasks recorded, the active ones and the last 20 listed with their GPUs"),
        ("fleet history gpus --bucket 5m (lab DB)",
         ["history", "gpus", "--since", str(LAB_END_S - 86_400), "--until", end,
          "--bucket", "5m", "--gpu", "lab01:0"], lab_env,
         f"24 h of one GPU in 5 min buckets; {LAB_GPUS} GPUs sampled every 10 s for 24 h, "
         "all but the last hour rolled up and pruned"),
    ]
    for name, args, command_env, what in commands:
        measured = measure_command(name, [*FLEET_CLI, *args], runs=runs, env=command_env)
        figure = Figure(
            section="start-up", name=name, unit="s", compares=f"whole process, local mode: {what}",
            fleet=measured, peers=[Measured("fleet --help", help_run.samples, cpu=help_run.cpu),
                                   orm_floor, baseline],
            target="≤ 3× fleet --help")
        figure.verdict = _cold_verdict(figure.ratios(), orm_floor)
        results.add(figure)


# The lab database's samples end here (epoch s, a whole hour), so its commands name absolute
# times and every run reads the same rows.
LAB_END_S = 1_796_000_400
LAB_TASKS = 200
LAB_GPUS = 8


def seed_lab_database(path: Path) -> Path:
    """A database as a lab's would look after a day: one host with LAB_GPUS GPUs sampled every
    10 s for 24 h (all but the last hour rolled up into minutes and 5-minute periods, and those
    raw samples pruned), and LAB_TASKS finished tasks with their GPUs. Kept between runs."""
    from db.allocations import claim_gpus
    from db.engine import open_database
    from db.gpus import upsert_gpus
    from db.hosts import sync_hosts
    from db.retention import (
        prune_samples_and_rollups,
        rollup_gpu_five_minutes,
        rollup_gpu_minutes,
    )
    from db.samples import record_samples
    from db.tasks import create_task, finish_task, update_task
    from db.types import GpuFacts, GpuSampleIn, HostFacts

    if path.exists():
        return path
    log(f"seeding the start-up lab database {path}")
    end_ms, day_ms = LAB_END_S * 1000, 86_400_000
    with open_database(str(path)) as database:
        with database.session() as session:
            host = sync_hosts(session, [HostFacts("lab01", "10.0.0.1")], now=LAB_END_S)["lab01"]
            gpu_ids = upsert_gpus(session, host, [GpuFacts(i, f"GPU-lab-{i}", "Sim H100")
                                                  for i in range(LAB_GPUS)], now=LAB_END_S).ids
            for number in range(LAB_TASKS):
                submitted = LAB_END_S - 80_000 + 300 * number
                task = create_task(session, name=f"train-{number}", script="train.py",
                                   args=["--seed", str(number)], gpus_requested=2, owner="ann",
                                   now=submitted, constraints={"placement": {"gpus": 2}})
                claim_gpus(session, [gpu_ids[number % LAB_GPUS],
                                     gpu_ids[(number + 1) % LAB_GPUS]],
                           kind="task", owner="ann", now=submitted, task_id=task)
                update_task(session, task, state="running", host_id=host,
                            started_at=submitted + 1)
                finish_task(session, task, state="succeeded" if number % 7 else "failed",
                            now=submitted + 250, exit_code=0 if number % 7 else 1)
        for start in range(end_ms - day_ms, end_ms, 3_600_000):
            with database.session() as session:
                record_samples(session, [], [
                    GpuSampleIn(gpu_ids[idx], ts, utilization_gpu_pct=float(ts // 10_000 % 101),
                                memory_used_bytes=(ts // 1000 % 977) << 20,
                                temperature_c=40.0 + idx, power_draw_w=250.5)
                    for ts in range(start, start + 3_600_000, 10_000)
                    for idx in range(LAB_GPUS)])
        with database.session() as session:
            rollup_gpu_minutes(session, until_ms=end_ms - 3_600_000)
            rollup_gpu_five_minutes(session)
            prune_samples_and_rollups(session, raw_before_ms=end_ms - 3_600_000,
                                      rollup_before_ms=None)
    return path


def _cold_verdict(ratios: dict[str, float], orm_floor: Measured) -> str:
    """The ratio to --help, and to the imports a read through the ORM would pay."""
    ratio = ratios.get("fleet --help")
    if ratio is None:
        return ""
    verdict = f"{ratio:.2f}× fleet --help ({'meets' if ratio <= 3 else 'misses'} ≤3×)"
    floor_ratio = ratios.get(orm_floor.label)
    if floor_ratio is not None:
        verdict += f"; {floor_ratio:.2f}× the CLI + SQLAlchemy ORM imports alone"
    return verdict


def _binding_imports(pynvml_source: str) -> list[str]:
    """The modules the bootstrap (sys, zlib) and the shipped pynvml's top-level imports load."""
    import ast

    modules = ["sys", "zlib"]
    for node in ast.parse(pynvml_source).body:
        if isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.append(node.module)
    return list(dict.fromkeys(modules))


def least_probe_statement(pynvml_source: str) -> str:
    """The least any probe through this binding runs: the bootstrap's and the binding's imports,
    then os._exit, as the probe ends (without the interpreter's teardown: fleet_probe_cli)."""
    return "import " + ",".join(_binding_imports(pynvml_source)) + ";import os;os._exit(0)"


def host_probe_cost(results: Results, workdir: Path, runs: int) -> None:
    """What one probe costs on a host: the once-probe program run by Debian's python3 against
    the simulated libnvidia-ml (8 GPUs), vs `python3 -c pass`, `sh -c true` (what the floor
    runs) and python3 -S importing only what the bootstrap and pynvml import (the least any
    probe through this binding can cost a host)."""
    import os
    import shlex
    import shutil

    from fleet.probe.bundle import probe_command, probe_program, shipped_pynvml_source
    from fleet.sim import gpus as scenarios
    from fleet.sim.build import build_sim_tools
    from fleet.sim.gpus import write_config
    from tests.bench.common import ROOT, HostProbeCpu

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
    imports_statement = least_probe_statement(shipped_pynvml_source())
    binding = measure_command(
        "python3 -S + the binding's imports",
        ["sh", "-c", f"exec {python} -S -c {shlex.quote(imports_statement)}"], runs=runs * 2,
        note=f"`{imports_statement}`: the interpreter plus what the bootstrap and pynvml "
             "itself import, then os._exit as the probe ends; no probe through this binding "
             "costs a host less")
    floor_command = measure_command(
        "sh -c true", ["sh", "-c", "true"], runs=runs * 2,
        note="what sshd runs on a host for the asyncssh floor's `true` (the login shell's -c)")
    peers = [measure_command("python3 -c pass", [python, "-c", "pass"], runs=runs),
             binding, floor_command]
    figure = Figure(
        section="fan-out", name="one probe on a host (host-side cost)", unit="s",
        compares="wall and CPU of the remote side of one probe, run locally with the host's "
                 "python3, vs what the peers run remotely; in the namespace lab all hosts "
                 "share these 2 cores, so host CPU adds up across a fan-out",
        fleet=probe, peers=peers)
    cpu = probe.cpu_median or 0.0
    cold_cpu = sorted(cold)[len(cold) // 2]
    results.host_probe_cpu = HostProbeCpu(
        floor_command=floor_command.cpu_median or 0.0,
        binding_imports=binding.cpu_median or 0.0, probe=cpu)
    figure.verdict = (f"{1000 * cpu:.0f} ms CPU per probe per host, of which "
                      f"{1000 * (binding.cpu_median or 0.0):.0f} ms the interpreter and the "
                      f"binding's imports; a host's first probe (empty cache): "
                      f"{1000 * cold_cpu:.0f} ms")
    results.add(figure)
