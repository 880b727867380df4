"""Probe many hosts concurrently; each host's outcome is data (a HostStatus), never an exception."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleet.errors import HostError, HostUnreachable
from fleet.health.host_state import outcome_of
from fleet.model import HostOutcome, HostSpec
from fleet.ssh.options import SshOptions

if TYPE_CHECKING:
    from fleet.reports import ProbeReport

# How many hosts are handshaking at once; SSH handshakes are CPU-bound on the controller.
DEFAULT_FANOUT = 128
OUTER_DEADLINE_GRACE_S = 1.0
# The least a probe gets after a slow connect (within the outer grace): less would fail it as
# "no answer" when the host is merely slow to let us in.
MIN_PROBE_S = 0.5


@dataclass(frozen=True)
class HostStatus:
    """One host's probe outcome: "up" with a report, or the failure and its reason.

    `state` is the outcome word; the host state it leads to is decided when it is recorded
    (fleet.recorder, by the rule of fleet.health.host_state: "unreachable" is stored as "down").
    """

    spec: HostSpec
    state: HostOutcome
    reason: str | None
    report: ProbeReport | None
    elapsed_s: float
    finished_at: float

    @property
    def is_up(self) -> bool:
        """True when the host answered and its probe output was usable."""
        return self.state == "up"


ProgressCallback = Callable[[HostStatus, int, int], None]


async def probe_host(
    spec: HostSpec, options: SshOptions, *, timeout: float, tasks_dir: str | None = None
) -> HostStatus:
    """Connect to (or run locally on) one host and probe it once, within `timeout` seconds."""
    from fleet.probe.runner import probe_local, probe_ssh

    started = time.monotonic()
    connect_s = 0.0

    def finish(state: HostOutcome, reason: str | None, report: ProbeReport | None) -> HostStatus:
        if reason is not None and connect_s > timeout / 2:  # say where the time went
            reason += f" (the SSH login alone took {connect_s:.1f}s of the {timeout:g}s)"
        return HostStatus(
            spec, state, reason, report, time.monotonic() - started, time.time()
        )

    deadline = started + timeout
    try:
        # The inner calls get the remaining time and report precisely (stderr tail, which
        # phase); the outer deadline, slightly later, is only the backstop.
        async with asyncio.timeout(timeout + OUTER_DEADLINE_GRACE_S):
            if spec.connection == "local":
                report = await probe_local(spec, timeout=timeout, tasks_dir=tasks_dir)
            else:
                from fleet.ssh.connect import connect  # asyncssh: ~0.2 s, only for SSH hosts

                conn = await connect(spec, options)
                connect_s = time.monotonic() - started
                try:
                    remaining = max(deadline - time.monotonic(), min(MIN_PROBE_S, timeout))
                    report = await probe_ssh(conn, spec, timeout=remaining, tasks_dir=tasks_dir)
                finally:
                    conn.close()
    except HostError as exc:
        return finish(outcome_of(exc), exc.detail, None)
    except TimeoutError:
        error = HostUnreachable(spec.name, f"no answer within {timeout:g}s")
        return finish("unreachable", error.detail, None)
    return finish("up", None, report)


async def probe_hosts(
    specs: Sequence[HostSpec],
    options: SshOptions,
    *,
    timeout: float,
    fanout: int = DEFAULT_FANOUT,
    progress: ProgressCallback | None = None,
) -> list[HostStatus]:
    """Probe every host concurrently (at most `fanout` at once); results in `specs` order."""
    limit = asyncio.Semaphore(max(fanout, 1))
    done = 0

    async def one(spec: HostSpec) -> HostStatus:
        nonlocal done
        async with limit:
            status = await probe_host(spec, options, timeout=timeout)
        done += 1
        if progress is not None:
            progress(status, done, len(specs))
        return status

    tasks = [asyncio.create_task(one(spec), name=f"probe {spec.name}") for spec in specs]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
