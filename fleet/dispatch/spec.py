"""What to launch for a task, validated locally: script, interpreter, arguments, env, files.

Files sent with a task (`--with FILE|DIR`) land in the task directory under their base name.
Inside a `--with` directory, a symlink whose target lies inside that directory is uploaded as
a copy of the target file; a symlink to a directory, or pointing outside, is refused (a task
must never carry files from places the user did not name). Names that could escape or shadow
the task directory (`.`, `..`, `.fleet`, empty) are refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fleet.errors import ConfigError

if TYPE_CHECKING:
    from fleet.dispatch.environment import TaskEnvironment
    from fleet.dispatch.snapshot import Snapshot

CONTROL_DIR = ".fleet"  # inside a task directory: wrapper, pid, log, exit files
SNAPSHOT_DIR = "snapshot"  # inside a task directory: the --snapshot copy of the work tree
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "FLEET_TASK_ID",
                          "FLEET_TASK_DIR"})
# Variables the sh that starts a task owns: it sets IFS, PPID, PWD and OPTIND itself (the task
# would never see the value given), and bash as sh reads SHELLOPTS/BASHOPTS as its own options
# (SHELLOPTS=noexec: nothing runs, and exit 0). Every other name reaches the task as given.
SHELL_ENV = frozenset({"IFS", "PPID", "PWD", "OPTIND", "SHELLOPTS", "BASHOPTS"})
_FORBIDDEN_NAMES = frozenset({"", ".", "..", CONTROL_DIR})
MAX_UPLOAD_FILES = 10_000


@dataclass(frozen=True)
class UploadItem:
    """One local file (or directory to create) and its path relative to the task directory."""

    local: Path | None  # None: a directory to create
    remote: str  # relative, '/'-separated, never '..' or absolute

    @property
    def is_dir(self) -> bool:
        return self.local is None


@dataclass(frozen=True)
class TaskLaunch:
    """Everything the host needs to run a task; built by `build_launch`."""

    task_id: int
    script_name: str  # the script's file name inside the task directory
    interpreter: tuple[str, ...]  # () when the script is executed itself
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    gpu_uuids: tuple[str, ...]
    uploads: tuple[UploadItem, ...]
    workdir: str | None = None  # None: the task directory, or default_workdir inside it
    timeout_s: float | None = None
    timeout_grace_s: float = 10.0
    environment: TaskEnvironment | None = None  # --venv/--conda/--container
    default_workdir: str | None = None  # relative to the task directory (--snapshot's place)


def parse_env(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """`K=V` strings as (name, value); ConfigError for a bad name or a reserved one."""
    parsed: list[tuple[str, str]] = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not ENV_NAME.fullmatch(name):
            raise ConfigError(
                f"--env {pair!r}: expected NAME=VALUE with NAME like [A-Za-z_][A-Za-z0-9_]*"
            )
        if name in RESERVED_ENV:
            raise ConfigError(f"--env {name}: fleet sets this variable itself")
        if name in SHELL_ENV:
            raise ConfigError(f"--env {name}: the shell that starts the task sets or reads this "
                              "variable itself, so it cannot be passed (refused: "
                              f"{', '.join(sorted(SHELL_ENV))})")
        if "\0" in value:
            raise ConfigError(f"--env {name}: value contains a NUL byte")
        parsed.append((name, value))
    return tuple(parsed)


def choose_interpreter(script: Path, host_python: str, python: str | None) -> tuple[str, ...]:
    """How to run `script`: --python, `.py` → the host's python, `.sh` → bash, +x → itself."""
    if python:
        return (python,)
    if script.suffix == ".py":
        return (host_python,)
    if script.suffix == ".sh":
        return ("bash",)
    if os.access(script, os.X_OK):
        return ()
    raise ConfigError(
        f"{script}: cannot tell how to run it: name it *.py or *.sh, make it executable, "
        "or give --python PATH"
    )


def _checked_name(path: Path, what: str) -> str:
    name = path.name
    if name in _FORBIDDEN_NAMES or "/" in name or "\0" in name:
        raise ConfigError(f"{what} {str(path)!r}: its name {name!r} is not allowed in a task "
                          "directory")
    return name


def _walk_dir(root: Path, remote_root: str) -> list[UploadItem]:
    """Upload items for a --with directory; symlinks handled as the module docstring says."""
    resolved_root = root.resolve()
    items = [UploadItem(None, remote_root)]
    for current, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(current)
        relative = base.relative_to(root).as_posix()
        remote_base = remote_root if relative == "." else f"{remote_root}/{relative}"
        for dirname in sorted(dirnames):
            link = base / dirname
            if link.is_symlink():
                raise ConfigError(f"--with {root}: {link} is a symlink to a directory; "
                                  "fleet refuses to follow it")
            items.append(UploadItem(None, f"{remote_base}/{dirname}"))
        for filename in sorted(filenames):
            path = base / filename
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(resolved_root) or not target.is_file():
                    raise ConfigError(f"--with {root}: symlink {path} points outside the "
                                      "directory (or to no file); fleet refuses to upload it")
            elif not path.is_file():
                continue  # sockets, fifos, devices: nothing to copy
            items.append(UploadItem(path, f"{remote_base}/{filename}"))
        if len(items) > MAX_UPLOAD_FILES:
            raise ConfigError(f"--with {root}: more than {MAX_UPLOAD_FILES} files")
    return items


def plan_uploads(script: Path, extras: tuple[Path, ...],
                 snapshot: Snapshot | None = None) -> tuple[UploadItem, ...]:
    """The script, every --with path and the snapshot's copy (under SNAPSHOT_DIR) as upload
    items; ConfigError for anything unsafe."""
    if not script.is_file():
        raise ConfigError(f"script {str(script)!r} is not a readable file")
    items = [UploadItem(script, _checked_name(script, "script"))]
    for extra in extras:
        name = _checked_name(Path(os.path.normpath(extra)), "--with")
        if extra.is_dir() and not extra.is_symlink():
            items += _walk_dir(extra, name)
        elif extra.is_file():
            items.append(UploadItem(extra, name))
        else:
            raise ConfigError(f"--with {str(extra)!r}: no such file or directory")
    if snapshot is not None:
        items += _walk_dir(snapshot.copy, SNAPSHOT_DIR)
    seen: set[str] = set()
    for item in items:
        if item.remote in seen:
            raise ConfigError(f"two uploaded files would both be named {item.remote!r} in the "
                              "task directory")
        seen.add(item.remote)
    return tuple(items)


def build_launch(
    *,
    task_id: int,
    script: Path,
    host_python: str,
    gpu_uuids: tuple[str, ...],
    args: tuple[str, ...] = (),
    extras: tuple[Path, ...] = (),
    env: tuple[tuple[str, str], ...] = (),
    workdir: str | None = None,
    python: str | None = None,
    timeout_s: float | None = None,
    timeout_grace_s: float = 10.0,
    environment: TaskEnvironment | None = None,
    snapshot: Snapshot | None = None,
) -> TaskLaunch:
    """A validated TaskLaunch (ConfigError naming the bad input otherwise)."""
    uploads = plan_uploads(script, extras, snapshot)
    for arg in args:
        if "\0" in arg:
            raise ConfigError("script arguments cannot contain NUL bytes")
    if workdir is not None and (not workdir or "\0" in workdir):
        raise ConfigError("--workdir must be a non-empty path")
    if timeout_s is not None and timeout_s <= 0:
        raise ConfigError("--timeout must be positive")
    if environment is not None:
        host_python = environment.python()
    script_name = uploads[0].remote
    default_workdir = None
    if snapshot is not None:
        default_workdir = f"{SNAPSHOT_DIR}/{snapshot.cwd}" if snapshot.cwd else SNAPSHOT_DIR
        if snapshot.script is not None:  # run from the tree, next to its modules
            script_name = f"{SNAPSHOT_DIR}/{snapshot.script}"
            if script_name not in {item.remote for item in uploads}:
                raise ConfigError(f"--snapshot: the script {snapshot.script!r} is not in it")
    return TaskLaunch(
        task_id=task_id,
        script_name=script_name,
        interpreter=choose_interpreter(script, host_python, python),
        args=args,
        env=env,
        gpu_uuids=gpu_uuids,
        uploads=uploads,
        workdir=workdir,
        timeout_s=timeout_s,
        timeout_grace_s=timeout_grace_s,
        environment=environment,
        default_workdir=default_workdir,
    )
