"""`--snapshot`: a frozen copy of the submitting directory's git work tree, sent with the task.

What is copied is what `git ls-files -co --exclude-standard` lists (tracked files, and untracked
ones that .gitignore does not exclude), taken when the task is submitted: later edits do not
change a queued task. The copy lands in the task directory under `snapshot/`; the task runs in
the submitting directory's place inside it, and a script that lies in the tree runs from there
(its imports of neighbouring modules work). Symlinks to files inside the tree are copied as
files; a symlink to a directory or out of the tree is refused; submodules are not included.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from fleet.dispatch.spec import MAX_UPLOAD_FILES, SNAPSHOT_DIR
from fleet.errors import ConfigError

if TYPE_CHECKING:
    from fleet.dispatch.request import DispatchRequest

GIT_TIMEOUT_S = 60.0
# The most a snapshot may hold, the same as a submission through `fleet serve` may carry.
MAX_SNAPSHOT_BYTES = 256 << 20
_UNSAFE_PARTS = frozenset({"", ".", ".."})


@dataclass(frozen=True)
class Snapshot:
    """A taken snapshot: its local copy and where the script and submitting directory are."""

    copy: Path  # the directory holding the copied files (uploaded as `snapshot/`)
    source: str  # the work tree's top as the user has it (recorded, never read again)
    commit: str | None  # HEAD when it was taken; None in a repository without commits
    cwd: str  # the submitting directory inside the tree, '/'-separated ('' for its top)
    script: str | None  # the script's path inside the tree; None when it lies outside
    files: int = 0

    def to_dict(self) -> dict[str, Any]:
        """What the task's record and the wire keep (not the local copy's path)."""
        return {"source": self.source, "commit": self.commit, "cwd": self.cwd,
                "script": self.script, "files": self.files}

    @classmethod
    def from_dict(cls, data: object, copy: Path) -> Snapshot:
        """A snapshot staged under `copy` from `to_dict`'s data; ConfigError if malformed."""
        if not isinstance(data, dict):
            raise ConfigError("snapshot: expected an object")
        source, commit, cwd, script, files = (data.get(key) for key in
                                               ("source", "commit", "cwd", "script", "files"))
        if not isinstance(source, str) or not isinstance(cwd, str) or not isinstance(files, int) \
                or not isinstance(commit, str | None) or not isinstance(script, str | None):
            raise ConfigError("snapshot: source, commit, cwd, script or files malformed")
        if cwd:
            _checked_relative(cwd, "cwd")
        if script is not None:
            _checked_relative(script, "script")
        return cls(copy, source, commit, cwd, script, files)


def _checked_relative(path: str, what: str) -> None:
    if path.startswith("/") or "\0" in path or any(part in _UNSAFE_PARTS
                                                   for part in path.split("/")):
        raise ConfigError(f"snapshot {what} {path!r}: not a safe path inside the snapshot")


def _git(args: list[str], cwd: Path) -> bytes:
    try:
        result = subprocess.run(["git", *args], cwd=cwd, capture_output=True,
                                timeout=GIT_TIMEOUT_S, check=False)
    except FileNotFoundError as exc:
        raise ConfigError("--snapshot needs git on this machine (it copies what `git ls-files` "
                          "lists)") from exc
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(f"--snapshot: git {args[0]} took over {GIT_TIMEOUT_S:g}s in "
                          f"{cwd}") from exc
    if result.returncode != 0:
        detail = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ConfigError(f"--snapshot: {cwd} is not inside a git work tree"
                          + (f" ({detail[-1]})" if detail else ""))
    return result.stdout


def work_tree_files(directory: Path) -> tuple[Path, list[str]]:
    """The work tree's top and its files ('/'-separated, sorted); ConfigError outside git."""
    top = Path(os.fsdecode(_git(["rev-parse", "--show-toplevel"], directory).strip()))
    listed = _git(["ls-files", "-co", "--exclude-standard", "-z"], top).split(b"\0")
    names = sorted({os.fsdecode(name) for name in listed if name})
    if len(names) > MAX_UPLOAD_FILES:
        raise ConfigError(f"--snapshot: {top} has {len(names)} files, over {MAX_UPLOAD_FILES}: "
                          "add generated files to .gitignore")
    return top, names


def _copy_tree(top: Path, names: list[str], into: Path) -> int:
    """Copy `names` from `top` into `into`; the number of files copied."""
    resolved_top = top.resolve()
    total = 0
    copied = 0
    for name in names:
        source = top / name
        if source.is_symlink():
            target = source.resolve()
            if not target.is_relative_to(resolved_top) or not target.is_file():
                raise ConfigError(f"--snapshot: {source} is a symlink to a directory or out of "
                                  "the work tree; fleet does not follow it")
        if not source.is_file():
            continue  # deleted since it was committed, or a submodule (a directory)
        total += source.stat().st_size
        if total > MAX_SNAPSHOT_BYTES:
            raise ConfigError(f"--snapshot: {top}'s files are over {MAX_SNAPSHOT_BYTES >> 20} "
                              "MiB: add data and outputs to .gitignore, keep them on the hosts")
        target_path = into.joinpath(*PurePosixPath(name).parts)
        target_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copyfile(source, target_path)
        target_path.chmod(source.stat().st_mode & 0o700 | 0o600)
        copied += 1
    return copied


def take_snapshot(request: DispatchRequest, directory: Path, into: Path) -> DispatchRequest:
    """`request` with a snapshot of `directory`'s work tree copied into `into` (an empty
    private directory that must outlive the task's start). ConfigError outside a git tree."""
    top, names = work_tree_files(directory)
    copy = into / SNAPSHOT_DIR
    copy.mkdir(mode=0o700)
    files = _copy_tree(top, names, copy)
    commit = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=top,
                            capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    resolved_top = top.resolve()
    cwd = directory.resolve()
    cwd_in_tree = cwd.relative_to(resolved_top).as_posix() if cwd.is_relative_to(
        resolved_top) else ""
    script = request.script.resolve()
    script_in_tree = None
    if script.is_relative_to(resolved_top):
        relative = script.relative_to(resolved_top).as_posix()
        if (copy / relative).is_file():  # an ignored script is not in the copy: sent alone
            script_in_tree = relative
    snapshot = Snapshot(copy=copy, source=str(top),
                        commit=commit.stdout.decode().strip() or None if commit.returncode == 0
                        else None,
                        cwd="" if cwd_in_tree == "." else cwd_in_tree, script=script_in_tree,
                        files=files)
    return replace(request, snapshot=snapshot,
                   script=copy / script_in_tree if script_in_tree else request.script,
                   shown_script=request.shown_script or str(request.script))
