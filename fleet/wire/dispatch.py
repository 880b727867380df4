"""Dispatch on the wire: a task's request with its files, and the events of its stream."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta, Struct, field

from fleet.wire.bounds import DurationS, SqlInt, Text
from fleet.wire.placement import check_placement

# The most a submission (script and --with files, before base64) may carry through the server.
MAX_UPLOAD_BYTES = 256 << 20


class UploadEntry(Struct, frozen=True, forbid_unknown_fields=True):
    """One file (data and permission bits) or directory (data None) of a task, by its path
    relative to the task directory ('/'-separated)."""

    path: Text
    data: bytes | None = None
    mode: Annotated[int, Meta(ge=0, le=0o7777)] = 0o600


class ArraySubmit(Struct, frozen=True, forbid_unknown_fields=True):
    """A job array's part of a submission: its spec (`0-15%4`) and each member's arguments
    (placeholders already filled in by the client), in index order."""

    spec: str
    member_args: tuple[tuple[str, ...], ...]


class SubmitRequest(Struct, frozen=True, forbid_unknown_fields=True):
    """Body of `POST /v1/tasks`: what `fleet dispatch` was asked, with the files themselves.

    `files[0]` is the script; `extras` names the top-level `--with` entries in order. `shown_*`
    are the paths as the client named them (what the task row records). The owner is never sent:
    it is the caller's Unix user.
    """

    files: tuple[UploadEntry, ...]
    extras: tuple[str, ...]
    shown_script: str
    shown_extras: tuple[str, ...]
    placement: dict[str, Any]  # PlacementRequest.to_dict(), held to PlacementWire
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None
    python: str | None = None
    timeout_s: DurationS | None = None
    grace_s: DurationS = 10.0
    name: Text | None = None
    priority: SqlInt = 0
    wait: bool = False
    queue_timeout_s: DurationS = 24 * 3600.0
    follow: bool = True  # False (--detach): the stream ends once the task runs
    # With wait and not follow (--wait --detach): the stream ends once the task waits in the
    # queue (its first `waiting`) or runs, whichever is first; the server starts it later.
    until_queued: bool = False
    explain: bool = False  # the started event carries the placement's explanation
    lost_after_s: DurationS | None = None
    notify: bool = False  # --notify: the task's events carry notify: true
    override_limits: bool = False  # admin only: this task ignores the `limits:` settings
    environment: dict[str, str] | None = None  # --venv/--conda/--container: {kind, value}
    snapshot: dict[str, Any] | None = None  # --snapshot: its files are under snapshot/
    hostfile: str = "hostfile"  # a gang's (placement.nodes > 1) hostfile in each task dir
    array: ArraySubmit | None = None  # --array: one task per index, driven by the server

    def __post_init__(self) -> None:
        check_placement(self.placement)


class SubmittedEvent(Struct, frozen=True):
    """`submitted`: the task is recorded (queued or placing) under this id."""

    task_id: int


class WaitingEvent(Struct, frozen=True):
    """`waiting`: a line about the queue (`--wait`)."""

    message: str


class StartedEvent(Struct, frozen=True):
    """`started`: the task runs on its host."""

    task_id: int
    host: str
    task_dir: str
    pgid: int | None
    gpu_uuids: tuple[str, ...]
    gpu_indices: tuple[int, ...]
    started_at: int
    timeout_s: float | None = None
    explanation: str | None = None
    nodes: tuple[StartedEvent, ...] = ()  # a gang's every node, rank order (itself first)


class OutputEvent(Struct, frozen=True):
    """`output`: bytes the task wrote (stdout and stderr, in order), base64 in JSON."""

    data: bytes


class EndedEvent(Struct, frozen=True):
    """`ended`: fleet.dispatch.ending.Ending, the task's recorded end."""

    state: str
    exit_code: int | None
    error: str | None
    ended_at: int
    duration_s: float | None
    timed_out: bool = False


class LogQuery(Struct, frozen=True, forbid_unknown_fields=True):
    """Query of `GET /v1/tasks/{id}/log`: keep streaming until the task ends, or not."""

    follow: bool = False
    lost_after_s: DurationS | None = None


class PlaceRequest(Struct, frozen=True, forbid_unknown_fields=True):
    """Body of `POST /v1/place`: where would this fit now (nothing is claimed)."""

    placement: dict[str, Any]  # PlacementRequest.to_dict(), held to PlacementWire

    def __post_init__(self) -> None:
        check_placement(self.placement)


class PlaceReport(Struct, frozen=True):
    """A placement as the CLI shows it: host (None: nothing fits), the summary line, the
    explanation text and the explanation as data (fleet.render.explain)."""

    host: str | None
    summary: str
    explanation: str
    data: dict[str, Any] = field(default_factory=dict)
