"""One server per socket, one recorder per database: flock'd pid files naming their holder,
symlinks refused, stale sockets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.errors import ConfigError
from fleet.server.locks import MONITOR, InstanceLock, database_lock_path, remove_stale_socket

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.pwrite(fd, f"{os.getpid()}\\n".encode(), 0)
print("held", flush=True)
time.sleep(60)
"""


def test_a_held_lock_names_its_pid_and_frees_when_the_holder_dies(tmp_path: Path) -> None:
    path = tmp_path / "fleet.sock.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(ConfigError, match=f"pid {holder.pid}"):
            InstanceLock(path, "socket x").acquire()
    finally:
        holder.kill()
        holder.wait(timeout=10)
    lock = InstanceLock(path, "socket x")
    deadline = time.monotonic() + 10
    while True:  # the kernel drops a dead process's flock
        try:
            lock.acquire()
            break
        except ConfigError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert path.read_text() == f"{os.getpid()} fleet serve\n"
    lock.release()
    assert path.read_text() == ""


def test_the_holder_is_named_as_what_it_is(tmp_path: Path) -> None:
    path = tmp_path / "fleet.db.serve.lock"
    monitor = InstanceLock(path, "SQLite database x", MONITOR)
    monitor.acquire()
    try:  # flock: a second open file conflicts even in the same process
        with pytest.raises(ConfigError, match=rf"^another fleet monitor \(pid {os.getpid()}\) "
                           r"is already running on SQLite database x; stop it first"):
            InstanceLock(path, "SQLite database x", same_kind_hint="pairs need PostgreSQL"
                         ).acquire()  # the hint is for a second server, not beside a monitor
        with pytest.raises(ConfigError, match=r"running on SQLite database x \(pairs need "
                                              r"PostgreSQL\); stop it first"):
            InstanceLock(path, "SQLite database x", MONITOR,
                         same_kind_hint="pairs need PostgreSQL").acquire()
    finally:
        monitor.release()


def test_a_planted_symlink_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "x.lock").symlink_to(victim)
    with pytest.raises(ConfigError, match="cannot open the lock file"):
        InstanceLock(tmp_path / "x.lock", "socket x").acquire()
    assert victim.read_text() == "precious"


def test_only_a_socket_is_replaced(tmp_path: Path) -> None:
    stale = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(stale))
    listener.close()
    remove_stale_socket(stale)
    assert not stale.exists()
    remove_stale_socket(stale)  # nothing there: fine
    stale.write_text("not a socket")
    with pytest.raises(ConfigError, match="not a socket"):
        remove_stale_socket(stale)
    assert stale.exists()


def test_database_lock_sits_next_to_a_sqlite_file_only(tmp_path: Path) -> None:
    assert database_lock_path(f"sqlite:///{tmp_path}/f.db") == tmp_path / "f.db.serve.lock"
    assert database_lock_path("sqlite://") is None
    assert database_lock_path("sqlite:///:memory:") is None
    assert database_lock_path("postgresql://u@h/fleet") is None
