"""TUI benchmark (not a pass/fail test): CPU of the TUI process at 1 Hz with 100 and 1,000 hosts
(8 GPUs each) from a synthetic snapshot source, and time to first frame.

    .venv/bin/python -m tests.bench.bench_tui [--seconds 20] [--hosts 100,1000] [--changed 0.2]
                                             [--prebuilt]

Each scale runs in its own process: the app renders headless (Textual's full compositor, no
terminal writes) at 160×45; the harness makes the snapshots, the first one's making left out
of the time to first frame, so only the TUI's own work is measured;
`--changed` is the fraction of hosts whose readings change each second; `--prebuilt` makes
every snapshot before the app starts, as this harness did until 2026-12-02.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from functools import partial

from fleet.snapshot import FleetSnapshot, HostSnapshot
from tests.tui.fake_service import NOW, FakeService, gpu, host

VARIANTS = 8


def synthetic_fleet(hosts: int, changed: float, seed: int = 1) -> list[FleetSnapshot]:
    """VARIANTS snapshots in which `changed` of the hosts differ from one to the next."""
    return list(synthetic_frames(hosts, changed, seed))


def synthetic_frames(hosts: int, changed: float, seed: int = 1) -> Iterator[FleetSnapshot]:
    """synthetic_fleet's snapshots, each built when it is asked for."""
    rng = random.Random(seed)

    def make(index: int) -> HostSnapshot:
        name = f"node{index:04d}"
        return host(name, [gpu(name, i, "NVIDIA H100 80GB HBM3", 80, rng.uniform(0, 100),
                               rng.uniform(0, 80), rng.uniform(30, 90), rng.uniform(60, 700))
                           for i in range(8)], groups=(f"rack{index % 20}",))

    current = [make(i) for i in range(hosts)]
    for _ in range(VARIANTS):
        moved = set(rng.sample(range(hosts), max(1, int(hosts * changed))))
        current = [make(i) if i in moved else h for i, h in enumerate(current)]
        yield FleetSnapshot(taken_at=NOW, hosts=tuple(current),
                            changed=frozenset(f"node{i:04d}" for i in moved))


class SyntheticService(FakeService):
    """The fake service with a 1 Hz stream of synthetic snapshots.

    As a live fleet's, the first is made after the app started, and alone: the others are
    made after it was shown, before the steady window. With `prebuilt` (the harness until
    2026-12-02) all VARIANTS exist before the app starts, so the first frame's garbage
    collections also walk seven more fleets' worth of objects than a live TUI holds.
    """

    build: Callable[[], Iterator[FleetSnapshot]]
    build_s = 0.0  # seconds making the first snapshot took, left out of the time to first frame
    frames: list[FleetSnapshot] | None = None  # set beforehand when pre-built

    async def watch(self) -> AsyncIterator[FleetSnapshot]:
        later: Iterator[FleetSnapshot] = iter(())
        if self.frames is None:
            started = time.monotonic()
            later = self.build()
            self.frames = [next(later)]
            self.build_s = time.monotonic() - started
        yield self.frames[0]
        await asyncio.sleep(1.0)
        self.frames += later  # made once the first frame is on screen
        tick = 1
        while True:
            yield replace(self.frames[tick % len(self.frames)], taken_at=NOW + tick)
            tick += 1
            await asyncio.sleep(1.0)


async def measure(hosts: int, seconds: float, changed: float, prebuilt: bool = False
                  ) -> dict[str, float]:
    from tui.app import FleetApp

    service = SyntheticService()
    service.build = partial(synthetic_frames, hosts, changed)
    if prebuilt:
        service.frames = list(service.build())
    app = FleetApp(service, clock=lambda: NOW)
    started = time.monotonic()
    result: dict[str, float] = {}

    async def sample() -> None:
        deadline = time.monotonic() + 120
        while app.first_frame_at is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        result["first_frame_s"] = ((app.first_frame_at or time.monotonic()) - started
                                   - service.build_s)
        await asyncio.sleep(2.0)  # let the first re-sorts and layout settle
        seen, cpu0, wall0 = app.snapshots_seen, time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        result["cpu_pct"] = 100 * (time.process_time() - cpu0) / (time.monotonic() - wall0)
        result["ticks"] = app.snapshots_seen - seen
        result["rows"] = app.screen.query_one("#fleet-table").row_count  # type: ignore[attr-defined]
        app.exit()

    async with asyncio.TaskGroup() as group:
        group.create_task(sample())
        await app.run_async(headless=True, size=(160, 45))
    return result


def _host_counts(text: str) -> list[int]:
    """`--hosts 1,1000` as [1, 1000]; argparse reports anything else as a usage error."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use host counts like 1,1000") from None
    if any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: every host count must be at least 1")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", default="100,1000", type=_host_counts,
                        help="comma-separated fleet sizes, e.g. 1,1000")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--changed", type=float, default=0.2)
    parser.add_argument("--prebuilt", action="store_true",
                        help="build every snapshot before the app starts (the old harness)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(measure(args.child, args.seconds, args.changed,
                                             args.prebuilt))))
        return 0
    print(f"TUI at 1 Hz, {args.changed:.0%} of hosts changing per tick, {args.seconds:g}s "
          f"steady window, {os.cpu_count()} cores")
    print(f"{'hosts':>6} {'GPUs':>6} {'rows':>5} {'first frame':>12} {'CPU':>7} {'ticks':>6}")
    for count in args.hosts:
        out = subprocess.run([sys.executable, "-m", "tests.bench.bench_tui", "--child",
                              str(count), "--seconds", str(args.seconds), "--changed",
                              str(args.changed), *(["--prebuilt"] if args.prebuilt else [])],
                             capture_output=True, text=True, check=True,
                             timeout=args.seconds + 300)
        numbers = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{count:>6} {count * 8:>6} {int(numbers['rows']):>5} "
              f"{numbers['first_frame_s']:>11.2f}s {numbers['cpu_pct']:>6.1f}% "
              f"{int(numbers['ticks']):>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
