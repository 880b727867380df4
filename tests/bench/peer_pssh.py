"""parallel-ssh peer: run `true` on every host at once (ParallelSSHClient, pool = hosts).

Run: python tests/bench/peer_pssh.py HOSTS.json KEY. Exits non-zero unless every host ran it.
parallel-ssh (libssh2) does no host-key checking at all; the bench notes that.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pssh.clients import ParallelSSHClient  # type: ignore[import-untyped]


def main() -> int:
    hosts = json.loads(Path(sys.argv[1]).read_text())
    key = sys.argv[2]
    client = ParallelSSHClient([h["address"] for h in hosts], user=hosts[0]["user"],
                               port=int(hosts[0]["port"]), pkey=key, pool_size=len(hosts),
                               timeout=30, num_retries=1)
    output = client.run_command("true", stop_on_errors=True)
    client.join(output, timeout=60)
    failed = [o.host for o in output if o.exit_code != 0 or o.exception is not None]
    if failed:
        print(f"failed on {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
