"""Figure 5: time until all of 32 announcing namespace hosts are listed by fleet's mDNS browse."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

from tests.bench.common import FLEET_CLI, Figure, Measured, Results, fleet_env, log
from tests.cluster.netcluster import Cluster

SERVICE = "_fleet._tcp"
DEADLINE_S = 90.0


async def _time_until_all(interface: str, addresses: set[str],
                          start_announcers: object | None = None) -> float:
    """Seconds from opening a browse session (and starting announcers, if given) to all seen."""
    from fleet.discovery.browse import DiscoverySession, select_interfaces

    started = time.perf_counter()
    async with DiscoverySession(select_interfaces([interface]), (SERVICE,)) as browse:
        if callable(start_announcers):
            await asyncio.to_thread(start_announcers)
        deadline = time.monotonic() + DEADLINE_S
        while True:
            seen = {service.address for service in browse.services.values()} & addresses
            if len(seen) == len(addresses):
                return time.perf_counter() - started
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(seen)}/{len(addresses)} hosts seen")
            await browse.wait_changed(0.5)


def discovery(results: Results, lab: Cluster, count: int, workdir: Path, runs: int) -> None:
    hosts = lab.hosts[:count]
    addresses = {host.address for host in hosts}
    interface = lab.controller_address
    log(f"discovery: {count} announcing hosts, browsing on {interface}")
    workdir.mkdir(parents=True, exist_ok=True)

    def start_all() -> None:
        for host in hosts:
            host.begin_announcer({SERVICE})

    try:
        cold = asyncio.run(_time_until_all(interface, addresses, start_all))
        registered_by = time.monotonic() + 60
        for host in hosts:
            host.wait_announcer(registered_by)
        warm = [asyncio.run(_time_until_all(interface, addresses)) for _ in range(runs)]
        env = fleet_env(workdir, workdir / "fleet.db")
        cli_walls, cli_counts = [], []
        for _ in range(runs):
            started = time.perf_counter()
            done = subprocess.run(
                [*FLEET_CLI, "--json", "discover", "--interface", interface, "--type", SERVICE,
                 "--timeout", "1s", "--no-record"],
                env=env, capture_output=True, timeout=60, check=False)
            cli_walls.append(time.perf_counter() - started)
            if done.returncode != 0:
                raise RuntimeError(f"fleet discover exited {done.returncode}: "
                                   f"{done.stderr.decode(errors='replace')[-1000:]}")
            listed = json.loads(done.stdout).get("hosts", [])
            cli_counts.append(sum(1 for h in listed if h.get("address") in addresses))
    finally:
        for host in hosts:
            host.stop_announcer()
    figure = Figure(
        section="discovery", name=f"discovery, {count} announcing hosts", unit="s",
        compares="time from opening fleet's mDNS browse (fleet.discovery.browse) until every "
                 "announcing host is resolved, hosts already announcing; and a whole "
                 "`fleet discover --timeout 1s` process",
        fleet=Measured("browse until all listed", warm),
        extra=[Measured("`fleet discover --timeout 1s` process", cli_walls,
                        note=f"hosts listed per run: {cli_counts} of {count}")])
    figure.verdict = (f"all {count} listed {statistics_text(warm)} after the browse opens; "
                      f"cold (announcers starting at the same moment, incl. their own "
                      f"registration): {cold:.1f} s")
    figure.notes.append(f"cold start including {count} announcer processes registering: "
                        f"{cold:.2f} s (one run); no peer tool measured (avahi-browse not used)")
    results.add(figure)


def statistics_text(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"in {ordered[len(ordered) // 2]:.2f} s (median of {len(samples)})"
