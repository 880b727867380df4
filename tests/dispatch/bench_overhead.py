"""Dispatch overhead on a namespace host with OpenSSH: `fleet dispatch` vs `scp` + `ssh python3`.

Run as root: `.venv/bin/python -m tests.dispatch.bench_overhead [RUNS]`. Prints medians and the
ratio. Not a pass/fail test (timings depend on the machine's load).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleet.sim import gpus as scenarios
from tests.cluster.clients import openssh_argv
from tests.cluster.hosts import ClusterHostSpec
from tests.cluster.netcluster import start_netns_cluster
from tests.cluster.sshd import KEX_ALGORITHMS


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, timeout=60)
    return time.perf_counter() - start


def main(runs: int) -> None:
    cluster = start_netns_cluster([ClusterHostSpec("gpu1", scenarios.idle(2, host="gpu1"))])
    try:
        home = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
        (home / ".ssh").mkdir()
        shutil.copy(cluster.known_hosts_file, home / ".ssh" / "known_hosts")
        shutil.copy(cluster.inventory_file, home / "inventory.yaml")
        script = home / "trivial.py"
        script.write_text("print('hello')\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "XDG_"))}
        env.update(HOME=str(home), FLEET_DB=str(home / "fleet.db"))
        fleet = [sys.executable, "-m", "fleet.cli.main"]
        subprocess.run([*fleet, "status"], env=env, cwd=home, check=True,
                       stdout=subprocess.DEVNULL)
        host = cluster.host("gpu1")
        ssh = openssh_argv(host, cluster.known_hosts_file)
        scp = ["scp", "-q", "-F", "/dev/null", "-i", str(host.identity_file),
               "-P", str(host.port), "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
               "-o", f"UserKnownHostsFile={cluster.known_hosts_file}",
               "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes",
               "-o", "BatchMode=yes", "-o", f"KexAlgorithms={KEX_ALGORITHMS}"]
        target = f"{host.user}@{host.address}"
        fleet_times, openssh_times = [], []
        for _ in range(runs):
            fleet_times.append(_timed([*fleet, "dispatch", str(script)], env, home))
            start = time.perf_counter()
            subprocess.run([*scp, str(script), f"{target}:/tmp/trivial.py"], check=True,
                           timeout=60)
            subprocess.run([*ssh, "python3 /tmp/trivial.py"], check=True, timeout=60,
                           stdout=subprocess.DEVNULL)
            openssh_times.append(time.perf_counter() - start)
        fleet_median = statistics.median(fleet_times)
        openssh_median = statistics.median(openssh_times)
        print(f"fleet dispatch median {fleet_median:.3f}s over {runs} runs "
              f"(min {min(fleet_times):.3f}s)")
        print(f"scp + ssh python3 median {openssh_median:.3f}s over {runs} runs "
              f"(min {min(openssh_times):.3f}s)")
        print(f"ratio {fleet_median / openssh_median:.2f}x")
        shutil.rmtree(home, ignore_errors=True)
    finally:
        cluster.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
