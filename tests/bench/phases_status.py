"""Where a `fleet status` process spends its wall time: the same steps as the command, timed.

Run (env as for the CLI): python tests/bench/phases_status.py INVENTORY
Prints one JSON line of cumulative seconds since interpreter start at each step.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import asyncio  # noqa: E402 - timed from the very start
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

MARKS: dict[str, float] = {}


def mark(name: str) -> None:
    MARKS[name] = round(time.perf_counter() - STARTED, 4)


async def _run(inventory: Path) -> int:
    from fleet.service import open as open_fleet

    mark("import fleet.cli.main + fleet.service")
    async with open_fleet(None, inventory) as service:
        mark("open: database (a current SQLite file: stdlib sqlite3, schema revision check)")
        specs = service.hosts(None)
        mark("select hosts (inventory file, adopted hosts from the database)")
        from fleet.fanout import probe_hosts

        statuses = await probe_hosts(specs, service.ssh_options, timeout=30, fanout=128)
        mark("probe every host (asyncssh import, connect, probe)")
        await service.host_service.record(statuses)
        mark("record to SQLite (plain SQL through the stdlib driver)")
    return sum(1 for status in statuses if status.is_up)


def main() -> int:
    import fleet.cli.main  # noqa: F401 - the CLI's own import cost

    up = asyncio.run(_run(Path(sys.argv[1])))
    mark("exit")
    print(json.dumps({"up": up, "marks": MARKS}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
