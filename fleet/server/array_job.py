"""A job array submitted through `fleet serve`: the server records and drives it, and streams
its members' output and progress to the client until the array ends.

The client's stream carries `submitted` (the array's id), `waiting` lines (members starting
and ending), prefixed `output`, then `ended` (the array's state, its exit code and the summary
as the error); with --detach it ends after `submitted`. A client that goes away leaves the
array running; `fleet cancel ARRAY` stops it.

An array outlives its server: a stopping server leaves running members running and queued
ones queued (one being started at that moment is cancelled, as a lone task would be), with the
submission kept beside its staged files (`array.json`), and the next server drives the array
on from its records (`resume_array_job`), within the same %MAX.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fleet.dispatch.request import KEEP_QUEUED
from fleet.errors import ConfigError, FleetError, ServerUnavailable, StorageError
from fleet.wire import dispatch as wire
from fleet.wire import errors as wire_errors

if TYPE_CHECKING:
    from fleet.caller import Caller
    from fleet.dispatch.array import ArrayMember
    from fleet.dispatch.array_spec import ArraySpec
    from fleet.dispatch.request import DispatchRequest, StartedTask
    from fleet.server.jobs import ArraySubmission, DispatchJob, Jobs
    from fleet.service import Fleet

log = logging.getLogger(__name__)


def array_members(request: DispatchRequest, array: wire.ArraySubmit
                  ) -> tuple[ArraySpec, list[ArrayMember]]:
    """The array's spec and members from a submission; ConfigError (a 400) when they do not
    match (the client checked the spec's size limit and filled the placeholders)."""
    from fleet.dispatch.array import ARRAY_ENV_NAMES, ArrayMember
    from fleet.dispatch.array_spec import parse_array

    spec = parse_array(array.spec, force=True)
    if len(array.member_args) != spec.size:
        raise ConfigError(f"--array {array.spec!r}: {len(array.member_args)} members' "
                          f"arguments for {spec.size} indices")
    clash = sorted(name for name, _value in request.env if name in ARRAY_ENV_NAMES)
    if clash:
        raise ConfigError(f"--env {', '.join(clash)}: fleet sets this for array members")
    members = [ArrayMember(index, replace(request, args=tuple(args), wait=True))
               for index, args in zip(spec.indices, array.member_args, strict=True)]
    for member in members:
        member.request.validate()
    return spec, members


async def run_array_job(fleet: Fleet, job: DispatchJob, request: DispatchRequest,
                        spec: ArraySpec, members: list[ArrayMember],
                        submitted: wire.SubmitRequest, caller: Caller, jobs: Jobs,
                        staged: Path) -> None:
    """Drive the array for `caller`, streaming its events to `job`; a stopping server
    (KEEP_QUEUED) leaves it, and its files, to the next one."""
    from fleet.dispatch.array import array_summary
    from fleet.dispatch.records import now_s
    from fleet.render.task_groups import fold_group
    from fleet.server.jobs import remove_tree

    def recorded(ids: list[int]) -> None:
        jobs.remember_array(staged, submitted, ids[0], caller.user)
        job.task_id = ids[0]
        job.started = True  # a client falling behind must not cancel the whole array
        job.emit("submitted", wire.SubmittedEvent(ids[0]))
        job.emit("waiting", wire.WaitingEvent(
            f"array {ids[0]}: {len(ids)} tasks, at most {spec.max_running or 'all'} at once"))
        if not submitted.follow:  # --detach: the client has the id; the server drives on
            job.end_stream()

    def started(index: int, node: StartedTask) -> None:
        indices = ",".join(str(i) for i in node.gpu_indices)
        job.emit("waiting", wire.WaitingEvent(
            f"array index {index} (task {node.task_id}) started on {node.host.name} GPU "
            f"{indices}"))

    kept = False
    try:
        array_id, rows = await fleet.dispatch_array(
            request, spec, members,
            on_output=lambda data: job.emit("output", wire.OutputEvent(data)),
            on_event=lambda message: job.emit("waiting", wire.WaitingEvent(message)),
            on_started=started, on_recorded=recorded, stop=job.stop,
            lost_after_s=submitted.lost_after_s, caller=caller)
        text, code = array_summary(rows)
        log.info("array %d of %s ended: %s", array_id, caller.user, text)
        job.emit("ended", wire.EndedEvent(fold_group(rows).state, code, text, now_s(), None))
    except FleetError as exc:
        job.emit("error", wire_errors.error_to_wire(exc)[1])
    except asyncio.CancelledError as exc:
        kept = exc.args == (KEEP_QUEUED,) and job.task_id is not None
        if kept:
            job.emit("error", wire_errors.error_to_wire(ServerUnavailable(
                f"fleet serve stopped; array {job.task_id}: running members run on, queued "
                "ones stay queued: the next fleet serve drives it on"))[1])
        raise
    except Exception:  # a bug: logged with its traceback, the client told without one
        log.exception("array of %s failed", caller.user)
        job.emit("error", wire_errors.request_error(500, wire_errors.INTERNAL,
                                                    "internal error (see the server's log)"))
    finally:
        if not kept:
            remove_tree(staged)
        job.finish()


async def resume_array_job(fleet: Fleet, record: ArraySubmission, directory: Path) -> None:
    """Drive on an array a stopped server left (nobody streams it); its files go at its end."""
    from fleet.dispatch.array import array_summary
    from fleet.dispatch.staging import staged_request
    from fleet.server.jobs import remove_tree

    kept = False
    try:
        if record.request.array is None:
            raise ConfigError("the kept submission has no array")
        request = replace(staged_request(record.request, directory / "files"),
                          owner=record.owner)
        spec, members = array_members(request, record.request.array)
        rows = await fleet.resume_array(
            spec, members, record.array_id, on_event=lambda message: log.info("%s", message),
            lost_after_s=record.request.lost_after_s)
        if rows is None:
            log.info("array %d: nothing left to drive", record.array_id)
        else:
            log.info("resumed array %d ended: %s", record.array_id, array_summary(rows)[0])
    except StorageError as exc:  # the database, not the array: the next server tries again
        kept = True
        log.warning("resumed array %d: %s; its submission is kept for the next fleet serve",
                    record.array_id, exc)
    except (FleetError, OSError) as exc:
        log.warning("resumed array %d: %s", record.array_id, exc)
    except asyncio.CancelledError as exc:
        kept = exc.args == (KEEP_QUEUED,)
        raise
    finally:
        if not kept:
            remove_tree(directory)
