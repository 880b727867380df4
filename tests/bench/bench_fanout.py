"""Figure 1: fresh fan-out probe (fleet status vs asyncssh floor, ssh -P, parallel-ssh, Ansible)
and a second round over already-open connections (fleet's probe vs asyncssh `true`)."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tests.bench.common import (
    FLEET_CLI,
    Figure,
    Measured,
    Results,
    fleet_env,
    have_module,
    log,
    measure_command,
    peer_binary,
)
from tests.bench.lab import HostSet, ansible_env

HERE = Path(__file__).resolve().parent
FLOOR = "asyncssh floor"
PROBE_PEER = "asyncssh + fleet's probe"


def floor_argv(host_set: HostSet, *, with_probe: bool = False) -> list[str]:
    """The asyncssh floor's command line: connect + `true` per host or, `with_probe`, connect +
    fleet's own one-shot probe (its command line and program, as `fleet status` sends them):
    what the hosts cost a fan-out without fleet's controller."""
    from fleet.probe.bundle import probe_command, probe_program

    lab = host_set.lab
    argv = [sys.executable, str(HERE / "peer_asyncssh.py"), str(host_set.hosts_json),
            str(lab.client_key), str(lab.known_hosts_file)]
    if with_probe:
        program = host_set.workdir / "probe-once.bin"
        program.write_bytes(probe_program("once", None))
        argv += ["--command", probe_command(), "--stdin", str(program)]
    return argv


def _fleet_status_ok(done: subprocess.CompletedProcess[bytes], count: int) -> str | None:
    if done.returncode != 0:
        return f"exit {done.returncode}"
    hosts = json.loads(done.stdout)["hosts"]
    up = [h for h in hosts if h["state"] == "up" and h["gpus"]]
    return None if len(up) == count else f"only {len(up)}/{count} hosts up with GPUs"


def fresh_fanout(results: Results, host_set: HostSet, runs: int, ansible_runs: int) -> None:
    count = host_set.count
    lab = host_set.lab
    log(f"fan-out, {count} hosts, fresh connections, {runs} runs each")
    env = fleet_env(host_set.home, host_set.db_path)
    fleet = measure_command(
        "fleet status",
        [*FLEET_CLI, "--json", "--inventory", str(host_set.fleet_inventory), "status",
         "--timeout", "30s"], runs=runs, env=env,
        check=lambda done: _fleet_status_ok(done, count),
        note="real CLI process: connect, full GPU + host probe, record to SQLite")
    peers = [measure_command(
        FLOOR, floor_argv(host_set), runs=runs,
        note="connect + `true` per host, asyncio.gather, whole process; asyncssh 2.24 "
             "negotiates curve25519-sha256 (sshd offers it first), like fleet")]
    peers.append(measure_command(
        PROBE_PEER, floor_argv(host_set, with_probe=True), runs=runs,
        note="the floor's client running fleet's one-shot probe (its command and program on "
             "stdin) instead of `true`: the hosts' share of a fan-out, without fleet's "
             "controller"))
    peers.append(measure_command(
        f"ssh xargs -P{count}",
        ["xargs", "-a", str(host_set.names_file), "-P", str(count), "-I{}", "ssh", "-F",
         str(lab.ssh_config_file), "-n", "{}", "true"], runs=runs,
        note="OpenSSH 9.2, kex curve25519-sha256 (cluster ssh_config), strict host keys"))
    skipped_peers = []
    if have_module("pssh"):
        peers.append(measure_command(
            "parallel-ssh",
            [sys.executable, str(HERE / "peer_pssh.py"), str(host_set.hosts_json),
             str(lab.client_key)], runs=runs,
            note="ParallelSSHClient pool=hosts, libssh2; no host-key checking"))
    else:
        skipped_peers.append("parallel-ssh")
        results.skip(f"fan-out {count}: parallel-ssh", "not installed (pip install parallel-ssh)")
    ansible = peer_binary("ansible")
    if ansible:
        peers.append(measure_command(
            "ansible -m command",
            [ansible, "all", "-m", "command", "-a", "cat /proc/loadavg"], runs=ansible_runs,
            env=ansible_env(host_set), timeout=600, warmup=0,
            note=f"forks={count}, pipelining, interpreter_python set, fresh connections, "
                 "ssh with the cluster's ssh_config (curve25519, known_hosts)"))
    else:
        skipped_peers.append("ansible")
        results.skip(f"fan-out {count}: ansible", "not installed (pip install ansible-core)")
    figure = Figure(
        section="fan-out", name=f"fresh fan-out, {count} hosts", unit="s",
        compares=f"wall time of one whole process reaching all {count} hosts over new SSH "
                 "connections; fleet does a full GPU+host probe, peers run a trivial command",
        fleet=fleet, peers=peers,
        target="≤ 1.5× asyncssh floor; ≥ 4× faster than Ansible")
    ratios = figure.ratios()
    floor = ratios.get(FLOOR)
    parts = []
    if floor is not None:
        parts.append(f"{floor:.2f}× floor ({'meets' if floor <= 1.5 else 'misses'} ≤1.5×)")
        with_probe = ratios.get(PROBE_PEER)
        if with_probe:
            hosts_share = floor / with_probe
            parts.append(f"the floor's client running fleet's probe takes {hosts_share:.2f}× "
                         f"the floor (the hosts' share) and fleet {with_probe:.2f}× that client "
                         "(the controller's share)")
    ansible_ratio = ratios.get("ansible -m command")
    if ansible_ratio:
        speedup = 1 / ansible_ratio
        parts.append(f"{speedup:.1f}× faster than Ansible "
                     f"({'meets' if speedup >= 4 else 'misses'} ≥4×)")
    floor_wall = peers[0].median
    host_cpu = results.host_probe_cpu
    if host_cpu is not None and floor_wall:
        cores = os.cpu_count() or 1
        least = host_cpu.ratio_estimate(floor_wall, count, cores, host_cpu.binding_imports)
        ours = host_cpu.ratio_estimate(floor_wall, count, cores, host_cpu.probe)
        parts.append(f"host CPU alone ({count} hosts on these {cores} cores) comes to "
                     f"≈ {least:.2f}× the floor for the least pynvml probe and ≈ {ours:.2f}× "
                     "for fleet's (no idle core time assumed)")
    figure.verdict = "; ".join(parts)
    results.add(figure)


async def _fleet_reuse_rounds(host_set: HostSet, rounds: int) -> list[float]:
    from fleet.model import HostSpec
    from fleet.probe.runner import probe_ssh
    from fleet.ssh.connect import connect
    from fleet.ssh.options import SshOptions

    options = SshOptions(known_hosts_files=(host_set.lab.known_hosts_file,),
                         pinned_hosts_file=host_set.workdir / "pinned_known_hosts",
                         ssh_config_files=())
    specs = [HostSpec(name=h.name, address=h.address, port=h.port, user=h.user,
                      identity_file=str(h.identity_file))
             for h in host_set.lab.hosts[: host_set.count]]
    conns = await asyncio.gather(*(connect(spec, options) for spec in specs))
    samples = []
    try:
        for index in range(rounds + 1):
            started = time.perf_counter()
            reports = await asyncio.gather(
                *(probe_ssh(conn, spec, timeout=30) for conn, spec in zip(conns, specs,
                                                                          strict=True)))
            elapsed = time.perf_counter() - started
            if any(len(report.gpus) == 0 for report in reports):
                raise RuntimeError("a host reported no GPUs on an open connection")
            if index > 0:  # the first round warms the probe program's compiled cache
                samples.append(elapsed)
    finally:
        for conn in conns:
            conn.close()
    return samples


def reuse_round(results: Results, host_set: HostSet, rounds: int) -> None:
    count = host_set.count
    log(f"second round over open connections, {count} hosts, {rounds} rounds")
    done = subprocess.run([*floor_argv(host_set), "--reuse-rounds", str(rounds)],
                          capture_output=True, check=True, timeout=300)
    floor = json.loads(done.stdout)["reuse_round_s"]
    fleet = asyncio.run(_fleet_reuse_rounds(host_set, rounds))
    figure = Figure(
        section="fan-out", name=f"round on open connections, {count} hosts", unit="s",
        compares="one more round on already-open connections: fleet's full one-shot probe "
                 "(probe_ssh, new channel + python3 on the host) vs asyncssh `true`",
        fleet=Measured("fleet probe_ssh round", fleet,
                       note="`fleet monitor` streams instead: one long-lived probe per host, "
                            "no per-round channel (its cost is figure 2)"),
        peers=[Measured("asyncssh `true` round", floor)])
    ratio = figure.ratios().get("asyncssh `true` round")
    if ratio:
        figure.verdict = (f"{ratio:.1f}× the bare `true` round: the host-side python3 probe "
                          "(interpreter start + NVML read) is the difference")
    results.add(figure)


def status_phases(results: Results, host_set: HostSet, runs: int) -> None:
    """Where `fleet status` spends its wall time (same steps as the command, marked)."""
    env = fleet_env(host_set.home, host_set.db_path)
    per_phase: dict[str, list[float]] = {}
    totals = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, str(HERE / "phases_status.py"), str(host_set.fleet_inventory)],
            env=env, capture_output=True, check=True, timeout=300)
        data = json.loads(done.stdout)
        if data["up"] != host_set.count:
            raise RuntimeError(f"phases: only {data['up']}/{host_set.count} hosts up")
        previous = 0.0
        for name, at in data["marks"].items():
            per_phase.setdefault(name, []).append(at - previous)
            previous = at
        totals.append(previous)
    figure = Figure(
        section="fan-out", name=f"fleet status phases, {host_set.count} hosts", unit="s",
        compares="wall time of each step of a `fleet status` process (tests/bench/"
                 "phases_status.py runs the command's steps with time marks)",
        fleet=Measured("total", totals),
        extra=[Measured(name, samples) for name, samples in per_phase.items()])
    before_probe = sum(statistics.median(samples) for name, samples in per_phase.items()
                       if not name.startswith(("probe", "record", "exit")))
    figure.verdict = (f"{before_probe:.2f} s pass before the first connection is opened "
                      "(imports, database open); see docs/bench/README.md")
    results.add(figure)
