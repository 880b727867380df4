"""The monitor floor: bare asyncssh reading the same streaming probe lines, json.loads only.

Run: python tests/bench/peer_monitor_floor.py HOSTS.json KEY KNOWN_HOSTS WARMUP_S MEASURE_S
One connection per host, the same probe program (fleet.probe.bundle, stream mode at 1 s) on
each, the same cipher preference and keepalive as fleet; every line is json.loads'ed and
dropped. Prints one JSON line: this process's CPU seconds (utime+stime) over the measured
window and the lines read in it. Not a test; the bench suite runs it next to `fleet monitor`.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from pathlib import Path

import asyncssh

from fleet.probe.bundle import probe_command, probe_program
from fleet.ssh.options import SshOptions

INTERVAL_S = 1.0
CONNECT_TIMEOUT_S = 30.0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _read(conn: asyncssh.SSHClientConnection, counter: list[int]) -> None:
    process = await conn.create_process(probe_command("python3"), encoding=None)
    process.stdin.write(probe_program("stream", INTERVAL_S))
    buffer = b""
    while chunk := await process.stdout.read(65536):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            json.loads(line)
            counter[0] += 1


async def _main(hosts: list[dict[str, object]], key: str, known_hosts: str, warmup_s: float,
                measure_s: float) -> dict[str, float]:
    defaults = SshOptions()
    conns = await asyncio.gather(*(
        asyncssh.connect(str(host["address"]), int(str(host["port"])),
                         username=str(host["user"]), client_keys=[key],
                         known_hosts=known_hosts, config=None,
                         connect_timeout=CONNECT_TIMEOUT_S,
                         encryption_algs=defaults.encryption_algs,
                         keepalive_interval=defaults.keepalive_interval,
                         keepalive_count_max=defaults.keepalive_count_max)
        for host in hosts))
    counter = [0]
    readers = [asyncio.create_task(_read(conn, counter)) for conn in conns]
    try:
        await asyncio.sleep(warmup_s)
        cpu_before, lines_before, started = _cpu_s(), counter[0], time.monotonic()
        await asyncio.sleep(measure_s)
        cpu = _cpu_s() - cpu_before
        window = time.monotonic() - started
        lines = counter[0] - lines_before
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        for conn in conns:
            conn.close()
        await asyncio.wait_for(asyncio.gather(*(conn.wait_closed() for conn in conns)), 30)
    failed = [reader.exception() for reader in readers
              if not reader.cancelled() and reader.exception() is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} probe streams failed: {failed[0]!r}")
    return {"cpu_s": cpu, "window_s": window, "lines": lines, "hosts": len(conns)}


def main() -> int:
    hosts_json, key, known_hosts, warmup_s, measure_s = sys.argv[1:6]
    hosts = json.loads(Path(hosts_json).read_text())
    result = asyncio.run(_main(hosts, key, known_hosts, float(warmup_s), float(measure_s)))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
