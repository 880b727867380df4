"""The server's socket appears at its path only once it listens, with its final mode."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from fleet.errors import ConfigError
from fleet.server.unix_socket import listening_socket


def test_a_client_that_finds_the_socket_can_connect_even_when_listen_comes_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fleet.sock"
    real_listen = socket.socket.listen

    def slow_listen(sock: socket.socket, backlog: int) -> None:
        time.sleep(0.3)  # the server descheduled between bind and listen
        real_listen(sock, backlog)

    monkeypatch.setattr(socket.socket, "listen", slow_listen)
    made: list[socket.socket] = []
    maker = threading.Thread(target=lambda: made.append(listening_socket(path, None)))
    maker.start()
    try:
        deadline = time.monotonic() + 10
        while not path.exists():
            assert time.monotonic() < deadline, "the socket never appeared"
            time.sleep(0.001)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))  # refused if the path existed before listen
    finally:
        maker.join(10)
        for sock in made:
            sock.close()
    assert [p.name for p in tmp_path.iterdir()] == ["fleet.sock"]  # no staging name left


@pytest.mark.parametrize("group", [False, True])
def test_the_socket_is_the_owners_or_the_groups_only(tmp_path: Path, group: bool) -> None:
    path = tmp_path / "fleet.sock"
    sock = listening_socket(path, os.getgid() if group else None)
    try:
        info = path.stat()
        assert stat.S_ISSOCK(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == (0o660 if group else 0o600)
        assert info.st_gid == os.getgid()
    finally:
        sock.close()


def test_a_socket_that_cannot_be_made_names_its_path(tmp_path: Path) -> None:
    path = tmp_path / "missing-dir" / "fleet.sock"
    with pytest.raises(ConfigError, match=f"cannot listen on {path}"):
        listening_socket(path, None)
