"""CPU of looking one host up in a known_hosts file, per connection: fleet's index against
parsing the file and matching it line by line (what every connection did before the index).

Each size is a file of N entries, one per host (`[10.0.x.y]:22 ssh-ed25519 ...`, as
`ssh-keyscan` writes them; `--hashed` as OpenSSH writes them with HashKnownHosts yes). Every
host of the file is looked up once per repeat, as a fan-out to all of them does.

Run: python -m tests.bench.hostkey_lookup [--sizes 64 2000] [--repeats 5]
Prints one JSON line: milliseconds of CPU per host looked up (median of the repeats).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import statistics
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fleet.ssh.hostkeys import host_field
from fleet.ssh.known_hosts import hosts_match, matching_entries, read_known_hosts


def _key_field(index: int) -> str:
    blob = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32)
    blob += index.to_bytes(32, "big")
    return f"ssh-ed25519 {base64.b64encode(blob).decode()}"


def _write(path: Path, names: list[str], hashed: bool) -> None:
    lines = []
    for index, name in enumerate(names):
        field = name
        if hashed:
            salt = os.urandom(20)
            digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
            field = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"
        lines.append(f"{field} {_key_field(index)}")
    path.write_text("\n".join(lines) + "\n")


def _ms_per_host(lookup: Callable[[str], object], names: list[str], repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        started = time.process_time()
        for name in names:
            lookup(name)
        runs.append((time.process_time() - started) / len(names) * 1e3)
    return round(statistics.median(runs), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 2000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="fleet-hostkey-") as workdir:
        path = Path(workdir) / "known_hosts"
        for size in args.sizes:
            names = [host_field(f"10.0.{i // 250}.{i % 250}", 22) for i in range(size)]
            for hashed in (False, True):
                _write(path, names, hashed)

                def line_by_line(name: str) -> object:
                    return [e for e in read_known_hosts(path) if hosts_match(e.hosts, name)]

                def indexed(name: str) -> object:
                    return matching_entries(path, name)

                for name in names[:: max(1, size // 16)]:
                    assert indexed(name) == line_by_line(name), name
                label = f"{size} {'hashed' if hashed else 'plain'}"
                results[label] = {
                    "fleet index": _ms_per_host(indexed, names, args.repeats),
                    # the old way is slow enough at 2,000 entries that a sample of hosts does
                    "line by line": _ms_per_host(line_by_line, names[:64], 3),
                }
    print(json.dumps({"ms_cpu_per_host": results}))


if __name__ == "__main__":
    main()
