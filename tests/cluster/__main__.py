"""Command line for the test cluster: `python -m tests.cluster up N | down | status` (repo root)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.cluster.cleanup import cleanup_runs, cleanup_stale_runs, sweep_orphans
from tests.cluster.clientfiles import ReachableHost
from tests.cluster.gpuconf import DEFAULT_GPU_SPEC, GPU_SPEC_HELP, parse_gpu_spec
from tests.cluster.hosts import ANNOUNCE_SERVICES, ClusterHostSpec
from tests.cluster.state import recorded_runs


def build_specs(
    count: int, gpu_spec: str, announce: Sequence[str], prefix: str
) -> list[ClusterHostSpec]:
    width = max(2, len(str(count)))
    names = [f"{prefix}{index + 1:0{width}d}" for index in range(count)]
    return [
        ClusterHostSpec(name=name, gpus=gpus, announce=frozenset(announce))
        for name, gpus in zip(names, parse_gpu_spec(gpu_spec, names), strict=True)
    ]


def print_cluster(
    hosts: Sequence[ReachableHost],
    inventory_file: Path,
    known_hosts_file: Path,
    ssh_config: Path,
    state_file: Path | None,
    setup_seconds: float,
) -> None:
    print(f"inventory:   {inventory_file}")
    print(f"known_hosts: {known_hosts_file}")
    print(f"ssh_config:  {ssh_config}   (try: ssh -F {ssh_config} NAME hostname)")
    if state_file is not None:
        print(f"state:       {state_file}")
    print(f"{len(hosts)} hosts up in {setup_seconds:.2f} s")
    for host in hosts:
        print(f"  {host.name:<12} {host.address}:{host.port}")
    sys.stdout.flush()


def wait_for_signal() -> None:
    received: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda number, frame: received.append(number))
    while not received:
        time.sleep(0.2)


def command_up(args: argparse.Namespace) -> int:
    specs = build_specs(args.count, args.gpus, args.announce or [], args.prefix)
    if os.geteuid() != 0:
        return asyncio.run(_up_fallback(specs))
    from tests.cluster.netcluster import start_netns_cluster

    try:
        cluster = start_netns_cluster(specs, detached=not args.foreground)
    except ValueError as exc:  # a cluster it cannot build (too many hosts, duplicate names)
        print(f"python -m tests.cluster up: {exc}", file=sys.stderr)
        return 2
    print_cluster(
        cluster.hosts,
        cluster.inventory_file,
        cluster.known_hosts_file,
        cluster.ssh_config_file,
        cluster.state_file,
        cluster.setup_seconds,
    )
    if not args.foreground:
        print("detached: `python -m tests.cluster down` removes it")
        return 0
    print("running until Ctrl-C / SIGTERM")
    try:
        wait_for_signal()
    finally:
        started = time.monotonic()
        cluster.close()
        print(f"down in {time.monotonic() - started:.2f} s")
    return 0


async def _up_fallback(specs: Sequence[ClusterHostSpec]) -> int:
    """Without root: SimSshHost servers live in this process, so the cluster lasts until Ctrl-C."""
    from tests.cluster.fallback import start_local_cluster

    cluster = await start_local_cluster(specs)
    try:
        print("not root: local SimSshHost servers on 127.0.0.1 (no namespaces, no faults)")
        print_cluster(
            cluster.hosts,
            cluster.inventory_file,
            cluster.known_hosts_file,
            cluster.ssh_config_file,
            None,
            cluster.setup_seconds,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        print("running until Ctrl-C / SIGTERM")
        await stop.wait()
    finally:
        await cluster.aclose()
    return 0


def command_down(args: argparse.Namespace) -> int:
    started = time.monotonic()
    removed = cleanup_runs(include_live=args.all, run_ids=args.run)
    if not args.run and os.geteuid() == 0:
        orphans = sweep_orphans()
        if orphans:
            print(f"removed parts of runs without a state file: {' '.join(orphans)}")
    print(
        f"removed {len(removed)} run(s) {' '.join(removed)} in {time.monotonic() - started:.2f} s"
    )
    remaining = recorded_runs()
    if remaining:
        print(
            f"left {len(remaining)} run(s) owned by live processes (use --all): "
            + " ".join(
                f"{state.run_id}(pid {state.owner.pid if state.owner else '-'})"
                for state in remaining
            )
        )
    return 0


def command_status(args: argparse.Namespace) -> int:
    del args
    runs = recorded_runs()
    if not runs:
        print("no test-cluster runs recorded")
        return 0
    for state in runs:
        if state.owner is None:
            owner = "detached"
        elif state.is_stale():
            owner = f"STALE (owner pid {state.owner.pid} gone)"
        else:
            owner = f"owner pid {state.owner.pid}"
        alive = sum(1 for process in state.processes if process.is_alive())
        print(
            f"{state.run_id}  {state.mode}  {owner}  hosts={len(state.namespaces)}  "
            f"processes alive={alive}/{len(state.processes)}  bridge={state.bridge}"
        )
        print(f"    inventory: {Path(state.run_dir) / 'inventory.yaml'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser(
        "up", help="start N hosts (namespaces + sshd as root; local servers otherwise)"
    )
    up.add_argument("count", type=int)
    up.add_argument("--gpus", default=DEFAULT_GPU_SPEC, help=GPU_SPEC_HELP)
    up.add_argument(
        "--announce",
        action="append",
        choices=sorted(ANNOUNCE_SERVICES),
        help="publish this mDNS service from every host (repeatable)",
    )
    up.add_argument(
        "--prefix", default="gpu", help="host name prefix (default: gpu → gpu01, gpu02, ...)"
    )
    up.add_argument(
        "--foreground", action="store_true", help="stay running; tear down on Ctrl-C/SIGTERM"
    )
    down = commands.add_parser("down", help="remove detached runs and leftovers of dead runs")
    down.add_argument(
        "--all", action="store_true", help="also runs owned by live processes (e.g. pytest)"
    )
    down.add_argument("--run", action="append", metavar="RUN_ID", help="only this run (repeatable)")
    commands.add_parser("status", help="list recorded runs")
    args = parser.parse_args(argv)
    if args.command == "up":
        cleanup_stale_runs()
        return command_up(args)
    if args.command == "down":
        return command_down(args)
    return command_status(args)


if __name__ == "__main__":
    sys.exit(main())
