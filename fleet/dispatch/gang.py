"""Multi-node gangs: N hosts × K GPUs claimed in one transaction, started together, ended together.

A gang is recorded as one task per node: rank 0's task is created at submission and its id is
the gang's id; the other ranks' tasks are created in the same transaction that claims every
node's GPUs, so a gang never holds part of its GPUs and a lost race leaves nothing behind.
Every node gets the rendezvous environment torchrun, DeepSpeed and MPI read (GANG_ENV_NAMES)
and a hostfile. Followed together, the first node to fail or be lost cancels the others
(SIGTERM, SIGKILL after the grace) and its ending is the gang's.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from fleet.dispatch.ending import DEFAULT_GRACE_S, DEFAULT_LOST_AFTER_S, Ending
from fleet.dispatch.lifecycle import (
    abort_start,
    admit,
    attend,
    end_task,
    host_spec,
    record_override,
    start_claimed,
    still_queued,
    task_placement,
)
from fleet.dispatch.records import now_s
from fleet.dispatch.request import KEEP_QUEUED, DispatchRequest, StartedTask
from fleet.dispatch.spec import CONTROL_DIR
from fleet.errors import AllocationConflict, ConfigError, DispatchError, NoPlacement

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from fleet.context import FleetContext
    from fleet.dispatch.remote import TaskHost
    from fleet.placement.claim import Claim
    from fleet.placement.limits import UserLimits
    from fleet.placement.place import PlacementResult
    from fleet.services.placement import PlacementService

GANG_ENV_NAMES = frozenset({"MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "NNODES", "GPUS_PER_NODE",
                            "WORLD_SIZE", "FLEET_NODE_HOSTS", "FLEET_HOSTFILE", "FLEET_GANG_ID"})
DEFAULT_HOSTFILE = "hostfile"
# A host label that overrides the address other nodes use to reach rank 0.
MASTER_ADDR_LABEL = "fleet.master_addr"
CLAIM_ATTEMPTS = 8
_FREE_PORT = ("import socket; s = socket.socket(); s.bind(('', 0)); "
              "print(s.getsockname()[1]); s.close()")


@dataclass(frozen=True)
class GangStart:
    """A gang running on its hosts: every node's started task and open host, in rank order."""

    gang_id: int
    nodes: tuple[StartedTask, ...]
    hosts: tuple[TaskHost, ...]

    @property
    def leader(self) -> StartedTask:
        """Rank 0, with every node attached (what callers show and return)."""
        return replace(self.nodes[0], nodes=self.nodes)


def check_hostfile_path(path: str) -> str:
    """The hostfile's path relative to the task directory; ConfigError when it could escape
    the task directory or land in fleet's control directory."""
    pure = PurePosixPath(path)
    if (not path or "\0" in path or pure.is_absolute() or ".." in pure.parts
            or not pure.parts or pure.parts[0] in (CONTROL_DIR, ".")):  # `.`: no parts at all
        raise ConfigError(f"--hostfile {path!r}: must be a relative path inside the task "
                          "directory (no '..', not absolute, not under .fleet)")
    return pure.as_posix()


def check_gang_request(request: DispatchRequest) -> None:
    """ConfigError for a gang whose --env sets a variable fleet sets for gangs."""
    clash = sorted(name for name, _value in request.env if name in GANG_ENV_NAMES)
    if clash:
        raise ConfigError(f"--env {', '.join(clash)}: fleet sets this for every node of a gang")
    check_hostfile_path(request.hostfile)


async def submit_gang(context: FleetContext, placement: PlacementService,
                      request: DispatchRequest, *,
                      on_wait: Callable[[str], None] | None = None,
                      on_recorded: Callable[[int], None] | None = None) -> GangStart:
    """Record the gang (rank 0's task), claim every node's GPUs at once (or queue with
    request.wait), and start every node; the gang's tasks all end on any failure."""
    from fleet.dispatch.lifecycle import create_record

    check_gang_request(request)
    owner = await admit(context, placement, request, queued=request.wait)
    hosts = await context.hosts.refresh()
    if request.placement.nodes > len(hosts.hosts):
        raise ConfigError(f"--nodes {request.placement.nodes}: fleet manages only "
                          f"{len(hosts.hosts)} host(s)")
    gang_id = await create_record(context, request, owner, group_kind="gang", group_index=0)
    if request.override_limits:
        await record_override(context, gang_id, owner)
    if on_recorded is not None:
        on_recorded(gang_id)
    claims = await _claim_for_gang(context, placement, request, gang_id, owner, on_wait)
    return await start_gang(context, request, gang_id, claims)


async def resume_gang(context: FleetContext, placement: PlacementService,
                      request: DispatchRequest, gang_id: int, owner: str) -> GangStart:
    """Claim (waiting in the queue) and start a gang recorded earlier and still queued."""
    claims = await _claim_for_gang(context, placement, request, gang_id, owner, None)
    return await start_gang(context, request, gang_id, claims)


def _member_ids(request: DispatchRequest, gang_id: int, owner: str
                ) -> Callable[[Session], list[int]]:
    """Creates ranks 1…N-1 in the claim's transaction; rank 0 is the gang's own task."""
    from db.tasks import create_task

    def create(session: Session) -> list[int]:
        ids = [gang_id]
        for rank in range(1, request.placement.nodes):
            ids.append(create_task(
                session, name=request.name or request.script.name,
                script=request.shown_script or str(request.script), args=request.args,
                gpus_requested=request.placement.gpus, owner=owner, now=now_s(),
                constraints=request.stored_constraints(), priority=request.priority,
                state="placing", group_kind="gang", group_index=rank, group_id=gang_id))
        return ids

    return create


async def _claim_for_gang(context: FleetContext, placement: PlacementService,
                          request: DispatchRequest, gang_id: int, owner: str,
                          on_wait: Callable[[str], None] | None) -> list[Claim]:
    """Every node's claim (waiting in the queue with request.wait); ends the gang on failure."""
    from fleet.placement.claim import claim_gang

    database = context.database
    make_ids = _member_ids(request, gang_id, owner)

    def attempt(result: PlacementResult, limits: UserLimits | None) -> list[Claim]:
        nodes = [(node.host, node.gpu_indices) for node in result.nodes]
        return claim_gang(database, nodes, owner=owner, task_ids=make_ids, limits=limits)

    try:
        if request.wait:
            from fleet.dispatch.queue import try_claim_queued, wait_and_claim_nodes

            async def claim_nodes(result: PlacementResult, limits: UserLimits
                                  ) -> list[Claim] | None:
                return await try_claim_queued(context, placement, gang_id,
                                              partial(attempt, result, limits))

            return await wait_and_claim_nodes(
                context, placement, task_placement(context, request.placement), gang_id, owner,
                claim_nodes,
                timeout_s=request.queue_timeout_s, on_wait=on_wait,
                override_limits=request.override_limits)
        limits = None if request.override_limits else placement.user_limits(owner)
        return await _claim_now(context, placement, request, limits, attempt)
    except asyncio.CancelledError as exc:
        if not (request.wait and exc.args == (KEEP_QUEUED,) and await still_queued(
                context, gang_id)):  # else a stopping fleet serve leaves it for the next
            await end_task(context, gang_id, "cancelled", "cancelled")
        raise
    except BaseException as exc:
        cancelled = isinstance(exc, KeyboardInterrupt)
        prefix = "no placement" if isinstance(exc, NoPlacement) else "not started"
        await end_task(context, gang_id, "cancelled" if cancelled else "failed",
                   f"{prefix}: {exc}" if str(exc) else "cancelled")
        raise


async def _claim_now(context: FleetContext, placement: PlacementService,
                     request: DispatchRequest, limits: UserLimits | None,
                     attempt: Callable[[PlacementResult, UserLimits | None], list[Claim]]
                     ) -> list[Claim]:
    """Place and claim the whole gang, placing again (ties at random) after a lost race."""
    from fleet.render.explain import render_explain
    from fleet.services.placement import RETRY_PAUSE_S, no_placement_message

    rng = random.Random()
    conflicts: list[str] = []
    for number in range(1, CLAIM_ATTEMPTS + 1):
        result = await placement.place(task_placement(context, request.placement),
                                       probe_stale=number == 1,
                                       rng=rng if number > 1 else None)
        if result.host is None:
            raise NoPlacement(no_placement_message(result), explanation=render_explain(result))
        try:
            claims = await context.call("claim the gang's GPUs", partial(attempt, result, limits))
        except AllocationConflict as exc:
            conflicts.append(str(exc))
            await placement.drain_seen_by_claim(exc)
            await asyncio.sleep(rng.uniform(*RETRY_PAUSE_S))
            continue
        return [replace(claims[0], placement=result, attempts=number), *claims[1:]]
    raise DispatchError(f"could not claim the gang's GPUs in {CLAIM_ATTEMPTS} attempts; other "
                        f"claims won every race ({'; '.join(conflicts[-3:])})")


def hostfile_text(addresses: Sequence[str], slots: int) -> str:
    """The hostfile MPI and DeepSpeed read: one `host slots=K` line per node, rank order."""
    return "".join(f"{address} slots={slots}\n" for address in addresses)


def node_env(request: DispatchRequest, gang_id: int, rank: int, addresses: Sequence[str],
             port: int) -> tuple[tuple[str, str], ...]:
    """The rendezvous variables of one node (rank 0 listens on MASTER_ADDR:MASTER_PORT)."""
    nodes, per_node = request.placement.nodes, request.placement.gpus
    return (*request.env,
            ("MASTER_ADDR", addresses[0]), ("MASTER_PORT", str(port)),
            ("NODE_RANK", str(rank)), ("NNODES", str(nodes)),
            ("GPUS_PER_NODE", str(per_node)), ("WORLD_SIZE", str(nodes * per_node)),
            ("FLEET_GANG_ID", str(gang_id)), ("FLEET_NODE_HOSTS", ",".join(addresses)),
            ("FLEET_HOSTFILE", request.hostfile))


async def _free_port(context: FleetContext, claim: Claim) -> int:
    """A TCP port free on rank 0's host now (the OS picks it; the script binds it soon after)."""
    from fleet.dispatch.remote import TaskHost

    spec = host_spec(context, claim.host)
    async with await TaskHost.open(spec, context.ssh_options, context.connections) as host:
        output = await host.checked(f"{spec.python} -c \"{_FREE_PORT}\"",
                                    "choose a free port for MASTER_PORT")
    try:
        return int(output.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise DispatchError(f"{claim.host}: no port number in {output!r}") from exc


def _address(context: FleetContext, name: str) -> str:
    spec = host_spec(context, name)
    return spec.label(MASTER_ADDR_LABEL) or spec.address


async def start_gang(context: FleetContext, request: DispatchRequest, gang_id: int,
                     claims: Sequence[Claim]) -> GangStart:
    """Start every node of a claimed gang; if any node cannot start, every node is stopped
    and ended (GPUs released) and the first error raised."""
    addresses = [_address(context, claim.host) for claim in claims]
    started: list[tuple[StartedTask, TaskHost] | BaseException] = []
    with tempfile.TemporaryDirectory(prefix="fleet-gang-") as scratch:
        try:
            port = await _free_port(context, claims[0])
            extra = _hostfile_upload(Path(scratch), request.hostfile,
                                     hostfile_text(addresses, request.placement.gpus))
            node_requests = [
                replace(request, env=node_env(request, gang_id, rank, addresses, port),
                        extras=(*request.extras, extra))
                for rank in range(len(claims))]
        except BaseException as exc:
            await asyncio.gather(*(_end_unstarted(context, claim, exc) for claim in claims))
            raise
        started = list(await asyncio.gather(
            *(start_claimed(context, node_request, claim.task_id or gang_id, claim)
              for node_request, claim in zip(node_requests, claims, strict=True)),
            return_exceptions=True))
    failures = [item for item in started if isinstance(item, BaseException)]
    if failures:
        running = [item for item in started if not isinstance(item, BaseException)]
        await asyncio.gather(*(abort_start(context, node.task_id, host, node.task_dir,
                                            failures[0]) for node, host in running))
        raise failures[0]
    ok = [item for item in started if not isinstance(item, BaseException)]
    return GangStart(gang_id, tuple(node for node, _host in ok),
                     tuple(host for _node, host in ok))


def _hostfile_upload(scratch: Path, relative: str, text: str) -> Path:
    """Write the hostfile under `scratch` at its path; the top-level entry to upload."""
    parts = PurePosixPath(relative).parts
    target = scratch.joinpath(*parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return scratch / parts[0]


async def _end_unstarted(context: FleetContext, claim: Claim, exc: BaseException) -> None:
    if claim.task_id is not None:
        await end_task(context, claim.task_id, "failed", f"could not start: {exc}")


class Prefixer:
    """A node's (or array member's) output as whole lines prefixed `[rank/host] ` (a partial
    line waits for its end)."""

    def __init__(self, label: int | str, host: str, on_output: Callable[[bytes], None]) -> None:
        self.prefix = f"[{label}/{host}] ".encode()
        self.on_output = on_output
        self.pending = b""

    def write(self, data: bytes) -> None:
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()
        if lines:
            self.on_output(b"".join(self.prefix + line + b"\n" for line in lines))

    def flush(self) -> None:
        if self.pending:
            self.on_output(self.prefix + self.pending + b"\n")
            self.pending = b""


async def attend_gang(context: FleetContext, gang: GangStart | Sequence[StartedTask], *,
                      on_output: Callable[[bytes], None], stop: asyncio.Event | None = None,
                      grace_s: float = DEFAULT_GRACE_S,
                      lost_after_s: float = DEFAULT_LOST_AFTER_S,
                      detach_on_stop: bool = False) -> Ending | None:
    """Follow every node to its end with prefixed output, and end the gang together:

    - the first node that fails or is lost has the others cancelled, and its ending is the
      gang's;
    - when rank 0 succeeds, the others get `grace_s` to end on their own and are then
      cancelled (as a batch job ends with its script: an MPI or DeepSpeed launcher on rank 0),
      and rank 0's ending is the gang's.

    `stop` cancels every node (with `detach_on_stop`, only stops following: None).
    """
    nodes = gang.nodes if isinstance(gang, GangStart) else tuple(gang)
    hosts: Sequence[TaskHost | None] = (gang.hosts if isinstance(gang, GangStart)
                                        else [None] * len(nodes))
    first: list[Ending] = []
    leader: list[Ending] = []
    cancels: list[asyncio.Future[None]] = []
    later: list[asyncio.Future[None]] = []

    def stopped() -> bool:
        return stop is not None and stop.is_set()

    async def after_grace(task_ids: list[int]) -> None:
        await asyncio.sleep(grace_s)
        await cancel_members(context, task_ids, grace_s)

    async def follow(rank: int, node: StartedTask, host: TaskHost | None) -> Ending | None:
        prefixer = Prefixer(rank, node.host.name, on_output)
        try:
            ending = await attend(context, node, host, on_output=prefixer.write, stop=stop,
                                  grace_s=grace_s, lost_after_s=lost_after_s,
                                  detach_on_stop=detach_on_stop)
        finally:
            prefixer.flush()
        others = [other.task_id for other in nodes if other.task_id != node.task_id]
        if ending is None or stopped() or first:
            return ending
        if rank == 0 and ending.state == "succeeded":
            leader.append(ending)
            later.append(asyncio.ensure_future(after_grace(others)))
        elif ending.state != "succeeded" and not (leader and ending.state == "cancelled"):
            first.append(replace(ending, error=f"node {rank} ({node.host.name}): "
                                 f"{ending.error or ending.state}"))
            cancels.append(asyncio.ensure_future(cancel_members(context, others, grace_s)))
        return ending

    try:
        endings = await asyncio.gather(*(follow(rank, node, host) for rank, (node, host)
                                         in enumerate(zip(nodes, hosts, strict=True))))
    finally:
        for job in later:  # every member has ended: nothing is left to cancel
            job.cancel()
        for job in [*cancels, *later]:
            with contextlib.suppress(asyncio.CancelledError):
                await job
    if detach_on_stop and stopped():
        return None
    if first:
        return first[0]
    done = [ending for ending in endings if ending is not None]
    if len(done) == len(endings) and all(ending.state == "succeeded" for ending in done):
        return max(done, key=lambda ending: ending.ended_at)
    if leader:
        return leader[0]
    return next((ending for ending in done if ending.state != "succeeded"),
                Ending("cancelled", None, "cancelled", now_s(), None))


async def cancel_members(context: FleetContext, task_ids: Sequence[int], grace_s: float) -> None:
    """Cancel these gang members (those already ended stay as they are). A host that cannot
    be reached leaves its member to its follower or the reconciler, which mark it lost."""
    from fleet.dispatch.cancel import cancel_task
    from fleet.errors import FleetError

    async def one(task_id: int) -> None:
        with contextlib.suppress(FleetError):
            await cancel_task(context, task_id, grace_s=grace_s)

    await asyncio.gather(*(one(task_id) for task_id in task_ids))
