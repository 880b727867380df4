"""The naive poller: every interval, a fresh `ssh HOST nvidia-smi --query-gpu=...` per host.

Run: python tests/bench/peer_naive_poller.py SSH_CONFIG HOSTNAMES_FILE WARMUP_S MEASURE_S
Prints one JSON line: CPU seconds of the ssh client processes (children rusage) and of this
parent during the measured window, how many host polls succeeded, and the GPU lines read.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

QUERY = ("--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,"
         "temperature.gpu,power.draw")
INTERVAL_S = 1.0


def poll_round(config: str, hosts: list[str]) -> tuple[int, int]:
    processes = [subprocess.Popen(["ssh", "-F", config, "-n", host, "nvidia-smi", QUERY,
                                   "--format=csv,noheader,nounits"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                 for host in hosts]
    ok = lines = 0
    for process in processes:
        out, _ = process.communicate(timeout=30)
        if process.returncode == 0:
            ok += 1
            lines += len(out.splitlines())
    return ok, lines


def main() -> int:
    config, names_file = sys.argv[1], Path(sys.argv[2])
    warmup_s, measure_s = float(sys.argv[3]), float(sys.argv[4])
    hosts = names_file.read_text().split()
    started = time.monotonic()
    measuring = False
    before_children = before_self = None
    ok_total = lines_total = rounds = 0
    late_rounds = 0
    tick = started
    while True:
        now = time.monotonic()
        if not measuring and now - started >= warmup_s:
            measuring, window_start = True, now
            before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
            before_self = resource.getrusage(resource.RUSAGE_SELF)
        if measuring and now - window_start >= measure_s:
            break
        ok, lines = poll_round(config, hosts)
        if measuring:
            ok_total += ok
            lines_total += lines
            rounds += 1
        tick += INTERVAL_S
        delay = tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            late_rounds += 1
            tick = time.monotonic()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    me = resource.getrusage(resource.RUSAGE_SELF)
    assert before_children is not None and before_self is not None
    print(json.dumps({
        "children_cpu_s": children.ru_utime + children.ru_stime
        - before_children.ru_utime - before_children.ru_stime,
        "parent_cpu_s": me.ru_utime + me.ru_stime - before_self.ru_utime - before_self.ru_stime,
        "host_polls": ok_total, "gpu_lines": lines_total, "rounds": rounds,
        "late_rounds": late_rounds, "window_s": time.monotonic() - window_start,
        "hosts": len(hosts)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
