"""Benchmark: probe round trip for 8 simulated GPUs (in-process, over SSH) and CLI start-up.

Run: .venv/bin/python -m tests.bench.probe_latency [--runs 10]
Prints medians and a JSON line; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleet.model import HostSpec
from fleet.sim import gpus as scenarios
from fleet.sim.build import build_sim_tools
from fleet.sim.gpus import write_config
from fleet.sim.sshhost import SimSshHost, generate_keypair
from fleet.ssh.options import SshOptions

ROOT = Path(__file__).resolve().parents[2]


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 1)


def _time_subprocess(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True, timeout=60)
        samples.append(time.perf_counter() - started)
    return samples


async def _ssh_probe_times(workdir: Path, env: dict[str, str], runs: int
                           ) -> tuple[list[float], list[float]]:
    from fleet.probe.runner import probe_ssh
    from fleet.ssh.connect import connect

    client_key, client_pub = generate_keypair(workdir / "client")
    host_key, _ = generate_keypair(workdir / "hostkey")
    server = SimSshHost("bench", host_key, client_pub, env, workdir / "home")
    port = await server.start()
    spec = HostSpec(name="bench", address="127.0.0.1", port=port, identity_file=str(client_key),
                    user=os.environ.get("USER", "root"))
    options = SshOptions(known_hosts_files=(), pinned_hosts_file=workdir / "known_hosts",
                         ssh_config_files=(), accept_new=True)
    fresh, reused = [], []
    try:
        for _ in range(runs):
            started = time.perf_counter()
            conn = await connect(spec, options)
            report = await probe_ssh(conn, spec, timeout=30)
            fresh.append(time.perf_counter() - started)
            assert len(report.gpus) == 8
            started = time.perf_counter()
            await probe_ssh(conn, spec, timeout=30)
            reused.append(time.perf_counter() - started)
            conn.close()
    finally:
        await server.stop()
    return fresh, reused


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    tools = build_sim_tools(ROOT / ".fleet-cache" / "sim")
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        workdir = Path(tmp)
        config = workdir / "gpus.conf"
        write_config(config, scenarios.mixed(8, host="bench"))
        sim_env = tools.env(config)
        env = {**os.environ, **sim_env}
        inventory = workdir / "inventory.yaml"
        inventory.write_text("hosts:\n  local:\n    connection: local\n")
        cli = [sys.executable, "-m", "fleet.cli.main"]
        results = {
            "fleet --help": _time_subprocess([*cli, "--help"], env, args.runs),
            "python -c pass": _time_subprocess([sys.executable, "-c", "pass"], env, args.runs),
            "fleet status, local, 8 GPUs (whole process)": _time_subprocess(
                [*cli, "--db", str(workdir / "b.db"), "-i", str(inventory), "status"], env,
                args.runs),
        }
        fresh, reused = asyncio.run(_ssh_probe_times(workdir, sim_env, args.runs))
        results["probe over SSH, new connection (connect + probe)"] = fresh
        results["probe over SSH, open connection"] = reused
    print(f"{'measurement':<52} {'median ms':>10}  runs={args.runs}")
    for name, samples in results.items():
        print(f"{name:<52} {_median_ms(samples):>10}")
    print(json.dumps({name: _median_ms(samples) for name, samples in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
