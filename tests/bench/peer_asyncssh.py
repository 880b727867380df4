"""The fan-out floor: a raw asyncssh script that connects to every host and runs `true` once.

Run: python tests/bench/peer_asyncssh.py HOSTS.json KEY KNOWN_HOSTS [--reuse-rounds N]
                                         [--command CMD --stdin FILE]
HOSTS.json is a list of {"address", "port", "user"}. Prints one JSON line: the fresh round's
seconds and, with --reuse-rounds, the seconds of each further `true` round on the open
connections. With --command and --stdin, the fresh round runs CMD with FILE's bytes on its
stdin instead of `true` (the bench passes fleet's probe command and program: what the hosts
cost a fan-out, without fleet's controller) and checks each host wrote something. Not a test;
the bench suite times this whole process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import asyncssh


async def _main(hosts: list[dict[str, object]], key: str, known_hosts: str,
                reuse: int, command: str, stdin: bytes | None) -> dict[str, object]:
    async def one(host: dict[str, object]) -> asyncssh.SSHClientConnection:
        conn = await asyncssh.connect(str(host["address"]), int(str(host["port"])),
                                      username=str(host["user"]), client_keys=[key],
                                      known_hosts=known_hosts, config=None, connect_timeout=30)
        if stdin is None:
            await conn.run(command, check=True, timeout=30)
        else:
            done = await conn.run(command, input=stdin, encoding=None, check=True, timeout=30)
            if not done.stdout:
                raise SystemExit(f"{host['address']}: {command[:40]}… wrote nothing")
        return conn

    started = time.perf_counter()
    conns = await asyncio.gather(*(one(host) for host in hosts))
    fresh = time.perf_counter() - started
    rounds = []
    for _ in range(reuse):
        started = time.perf_counter()
        await asyncio.gather(*(conn.run("true", check=True, timeout=30) for conn in conns))
        rounds.append(time.perf_counter() - started)
    for conn in conns:
        conn.close()
    await asyncio.gather(*(conn.wait_closed() for conn in conns))
    return {"fresh_s": fresh, "reuse_round_s": rounds, "hosts": len(conns)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("hosts_json", type=Path)
    parser.add_argument("key")
    parser.add_argument("known_hosts")
    parser.add_argument("--reuse-rounds", type=int, default=0)
    parser.add_argument("--command", default="true", help="what the fresh round runs [true]")
    parser.add_argument("--stdin", type=Path, help="a file whose bytes --command reads")
    args = parser.parse_args()
    if (args.stdin is None) != (args.command == "true"):
        parser.error("--command and --stdin go together")
    hosts = json.loads(args.hosts_json.read_text())
    stdin = None if args.stdin is None else args.stdin.read_bytes()
    print(json.dumps(asyncio.run(_main(hosts, args.key, args.known_hosts, args.reuse_rounds,
                                       args.command, stdin))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
