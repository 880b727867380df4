"""A dispatch request carried to `fleet serve` with its files, and staged again on the server.

The client packs what it would upload itself (the same `plan_uploads`: the same refusals of
symlinks out of a `--with` directory and of unsafe names), so the server never reads a client's
filesystem. The server writes the files into a private staging directory and dispatches from
there; every path is checked again, and nothing can land outside that directory.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import msgspec

from fleet.dispatch.spec import CONTROL_DIR, MAX_UPLOAD_FILES, plan_uploads
from fleet.errors import ConfigError
from fleet.wire.dispatch import MAX_UPLOAD_BYTES, SubmitRequest, UploadEntry

if TYPE_CHECKING:
    from fleet.dispatch.request import DispatchRequest

_UNSAFE_PARTS = frozenset({"", ".", ".."})


def pack(request: DispatchRequest, *, follow: bool, explain: bool = False,
         lost_after_s: float | None = None) -> SubmitRequest:
    """The request with its script and --with files read in; ConfigError when they are unsafe
    or together over MAX_UPLOAD_BYTES."""
    request.validate()
    entries: list[UploadEntry] = []
    total = 0
    for item in plan_uploads(request.script, request.extras, request.snapshot):
        if item.local is None:
            entries.append(UploadEntry(item.remote))
            continue
        data = item.local.read_bytes()
        total += len(data)
        if total > MAX_UPLOAD_BYTES:
            raise ConfigError(f"the script and --with files are over {MAX_UPLOAD_BYTES >> 20} "
                              "MiB: put large data where the hosts can read it, not in --with")
        entries.append(UploadEntry(item.remote, data, item.local.stat().st_mode & 0o700))
    return SubmitRequest(
        files=tuple(entries),
        extras=tuple(Path(os.path.normpath(extra)).name for extra in request.extras),
        shown_script=request.shown_script or str(request.script),
        shown_extras=request.shown_extras or tuple(str(extra) for extra in request.extras),
        placement=request.placement.to_dict(), args=request.args, env=request.env,
        workdir=request.workdir, python=request.python, timeout_s=request.timeout_s,
        grace_s=request.grace_s, name=request.name, priority=request.priority,
        wait=request.wait, queue_timeout_s=request.queue_timeout_s, follow=follow,
        explain=explain, lost_after_s=lost_after_s, notify=request.notify,
        override_limits=request.override_limits,
        environment=None if request.environment is None else request.environment.to_dict(),
        snapshot=None if request.snapshot is None else request.snapshot.to_dict(),
        hostfile=request.hostfile)


def _checked_path(path: str) -> PurePosixPath:
    relative = PurePosixPath(path)
    parts = path.split("/")
    if relative.is_absolute() or "\0" in path or parts[0] == CONTROL_DIR or any(
            part in _UNSAFE_PARTS for part in parts):
        raise ConfigError(f"uploaded file {path!r}: not a safe path inside a task directory")
    return relative


def stage(wire: SubmitRequest, directory: Path) -> DispatchRequest:
    """Write the request's files under `directory` (empty, private) and return the request as
    the server dispatches it (owner unset: the caller decides). ConfigError for bad input."""
    _write_files(wire, directory)
    return staged_request(wire, directory)


def _write_files(wire: SubmitRequest, directory: Path) -> None:
    if not wire.files or wire.files[0].data is None:
        raise ConfigError("a submission's first file must be its script")
    if len(wire.files) > MAX_UPLOAD_FILES + 1 + len(wire.extras) + (wire.snapshot is not None):
        raise ConfigError(f"more than {MAX_UPLOAD_FILES} uploaded files")
    made_dirs = {PurePosixPath(".")}
    written: set[PurePosixPath] = set()
    for entry in wire.files:
        relative = _checked_path(entry.path)
        if relative.parent not in made_dirs:
            raise ConfigError(f"uploaded file {entry.path!r}: its directory was not sent first")
        if relative in written:  # a file or directory of that name was sent already
            raise ConfigError(f"uploaded file {entry.path!r}: sent more than once")
        written.add(relative)
        try:
            _write_entry(directory.joinpath(*relative.parts), entry)
        except OSError as exc:  # a name too long for the filesystem, the disk full...
            raise ConfigError(f"uploaded file {entry.path!r}: cannot be staged: "
                              f"{exc.strerror or exc}") from exc
        if entry.data is None:
            made_dirs.add(relative)
    for name in wire.extras:
        if _checked_path(name).parent != PurePosixPath(".") or PurePosixPath(
                name) not in written:
            raise ConfigError(f"--with {name!r}: not among the uploaded files")


def _write_entry(target: Path, entry: UploadEntry) -> None:
    """Create one uploaded directory (data None) or file; never over anything already there."""
    if entry.data is None:
        target.mkdir(mode=0o700)
        return
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                         (entry.mode & 0o700) | 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(entry.data)


def staged_request(wire: SubmitRequest, directory: Path) -> DispatchRequest:
    """The request over files already staged under `directory` (`wire.files[0]` names the
    script; the other entries need not carry data). ConfigError for bad input."""
    from fleet.dispatch.environment import TaskEnvironment
    from fleet.dispatch.request import DispatchRequest
    from fleet.dispatch.snapshot import Snapshot
    from fleet.dispatch.spec import SNAPSHOT_DIR, parse_env
    from fleet.placement.request import PlacementRequest

    parse_env(tuple(f"{name}={value}" for name, value in wire.env))  # the same refusals
    request = DispatchRequest(
        script=directory / wire.files[0].path,
        placement=PlacementRequest.from_dict(dict(wire.placement)),
        args=wire.args, extras=tuple(directory / name for name in wire.extras),
        env=wire.env, workdir=wire.workdir, python=wire.python, timeout_s=wire.timeout_s,
        grace_s=wire.grace_s, name=wire.name or PurePosixPath(wire.shown_script).name,
        priority=wire.priority, wait=wire.wait, queue_timeout_s=wire.queue_timeout_s,
        notify=wire.notify, override_limits=wire.override_limits,
        environment=None if wire.environment is None else TaskEnvironment.from_dict(
            wire.environment),
        snapshot=None if wire.snapshot is None else Snapshot.from_dict(
            wire.snapshot, directory / SNAPSHOT_DIR))
    request = replace(request, shown_script=wire.shown_script,
                      shown_extras=wire.shown_extras, hostfile=wire.hostfile)
    request.validate()
    if request.is_gang:
        from fleet.dispatch.gang import check_gang_request

        check_gang_request(request)
    return request


def without_data(wire: SubmitRequest) -> SubmitRequest:
    """The request with only its script's name among the files (what a queue keeps on disk
    next to the staged files)."""
    return msgspec.structs.replace(wire, files=(UploadEntry(wire.files[0].path),))
