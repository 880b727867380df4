"""Real Unix users for identity tests: created with useradd, removed by name with userdel -r."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")
COMMAND_TIMEOUT_S = 60.0
# What the CLI imports on its way to the server (the copy fallback takes their packages).
CLIENT_MODULES = ("fleet.cli.main", "fleet.client.remote", "fleet.client.select",
                  "fleet.client.status", "fleet.render.tasks", "fleet.render.status_view",
                  "fleet.placement.reservations", "fleet.placement.request", "fleet.records",
                  "fleet.monitor.config", "fleet.timeparse", "fleet.render.table",
                  "fleet.cli.dispatch_cmd", "fleet.client.task_stream", "fleet.dispatch.staging")


@dataclass(frozen=True)
class UnixUser:
    """A created user: name, uid, home."""

    name: str
    uid: int
    home: Path


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S)


@contextlib.contextmanager
def unix_users(count: int, groups: Sequence[Sequence[str]]) -> Iterator[list[UnixUser]]:
    """`count` new users (unique names per run), user i in `groups[i]`; removed afterwards."""
    tag = secrets.token_hex(3)
    made_groups = sorted({group for wanted in groups for group in wanted})
    created: list[str] = []
    made: list[str] = []
    try:
        for group in made_groups:
            _run("groupadd", group)
            made.append(group)
        users = []
        for index in range(count):
            name = f"fl{tag}u{index}"
            extra = ["-G", ",".join(groups[index])] if groups[index] else []
            _run("useradd", "-m", "-s", "/bin/sh", *extra, name)
            created.append(name)
            import pwd

            entry = pwd.getpwnam(name)
            users.append(UnixUser(name, entry.pw_uid, Path(entry.pw_dir)))
        yield users
    finally:
        for name in created:
            subprocess.run(["userdel", "-r", name], capture_output=True,
                           timeout=COMMAND_TIMEOUT_S, check=False)
        for group in made:
            subprocess.run(["groupdel", group], capture_output=True,
                           timeout=COMMAND_TIMEOUT_S, check=False)


def unique_group(prefix: str) -> str:
    """A group name not used on this machine (up to 32 characters)."""
    return f"{prefix}{secrets.token_hex(3)}"


def python_path_for_others(scratch: Path, *, force_copy: bool = False) -> str:
    """A PYTHONPATH other users can import the CLI from: this checkout and the venv's
    packages when they are readable by others, else copies of what the CLI needs.

    The users run the CLI with Debian's /usr/bin/python3 on this checkout and the venv's packages
    (PYTHONPATH). When those are not readable by other users (a checkout under /root), the
    packages the CLI needs are copied to a world-readable directory first; key files are never
    touched.
    """
    site = Path(sysconfig.get_paths()["purelib"])
    if not force_copy and _readable_by_others(ROOT / "fleet" / "cli" / "main.py") and \
            _readable_by_others(site / "aiohttp" / "__init__.py"):
        return os.pathsep.join([str(ROOT), str(site)])
    target = scratch / "pythonpath"
    target.mkdir(parents=True, exist_ok=True)
    for package in ("fleet", "db"):
        shutil.copytree(ROOT / package, target / package, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for top in _client_packages(site):
        if top.startswith(("__editable__", "_distutils_hack")):  # the venv's own plumbing
            continue
        source = site / top
        if source.is_dir():
            shutil.copytree(source, target / top, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            shutil.copy2(source, target / top)
    _open_tree(scratch)
    return str(target)


def _client_packages(site: Path) -> list[str]:
    """Top-level names under site-packages that importing the client's modules loads."""
    code = ("import sys\n" + "".join(f"import {name}\n" for name in CLIENT_MODULES) +
            "import pathlib\nsite = pathlib.Path(sys.argv[1])\nfound = set()\n"
            "for module in list(sys.modules.values()):\n"
            "    path = getattr(module, '__file__', None)\n"
            "    if path and pathlib.Path(path).is_relative_to(site):\n"
            "        found.add(pathlib.Path(path).relative_to(site).parts[0])\n"
            "print('\\n'.join(sorted(found)))\n")
    completed = subprocess.run([sys.executable, "-c", code, str(site)], cwd=ROOT, check=True,
                               capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    return completed.stdout.split()


def _readable_by_others(path: Path) -> bool:
    """Whether a user who is neither owner nor in the group can read `path`."""
    for parent in path.parents:
        if not parent.stat().st_mode & 0o001:
            return False
    return bool(path.stat().st_mode & 0o004)


def _open_tree(top: Path) -> None:
    for directory, _dirs, files in os.walk(top):
        os.chmod(directory, 0o755)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o644)


def run_as(user: UnixUser, argv: Sequence[str], env: Mapping[str, str],
           timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run `argv` as `user` (runuser) with exactly `env` plus HOME, USER and PATH."""
    full_env = {"HOME": str(user.home), "USER": user.name, "LOGNAME": user.name,
                "PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", **env}
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"  # PATH of `env` may lack sbin
    return subprocess.run([runuser, "-u", user.name, "--", *argv], env=full_env,
                          cwd=user.home, capture_output=True, text=True, timeout=timeout,
                          check=False)
