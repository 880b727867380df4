"""Which server a command uses: --server, FLEET_SERVER, serve.socket, the default socket, none."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from fleet.client.select import HeadNode, select_server
from fleet.errors import ConfigError


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, short_dir: Path) -> Path:
    """No FLEET_SERVER, an empty config home, and a runtime dir with no socket yet."""
    monkeypatch.delenv("FLEET_SERVER", raising=False)
    monkeypatch.delenv("FLEET_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    return short_dir


def test_nothing_selected_means_local_mode(isolated: Path) -> None:
    assert select_server() is None


def test_explicit_option_beats_the_environment(isolated: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_SERVER", "/env/fleet.sock")
    choice = select_server("/opt/fleet.sock")
    assert choice is not None and (choice.socket_path, choice.origin) == \
        (Path("/opt/fleet.sock"), "--server")
    env_choice = select_server()
    assert env_choice is not None and env_choice.socket_path == Path("/env/fleet.sock")
    assert select_server("local") is None  # forces local mode even with FLEET_SERVER set


def test_settings_file_then_default_socket(isolated: Path, tmp_path: Path) -> None:
    default = isolated / "fleet" / "fleet.sock"
    default.parent.mkdir()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(default))
    try:
        assert select_server() is None  # bound but not listening: a dead server's socket
        listener.listen(1)
        choice = select_server()
        assert choice is not None and (choice.socket_path, choice.origin) == \
            (default, "the default socket")
        config = tmp_path / "config" / "fleet" / "config.yaml"
        config.parent.mkdir(parents=True)
        config.write_text("serve:\n  socket: /run/fleet/fleet.sock\n")
        configured = select_server()
        assert configured is not None and configured.socket_path == Path("/run/fleet/fleet.sock")
        config.write_text("serve:\n  sockets: /x\n")
        with pytest.raises(ConfigError, match=r"config\.yaml:2"):
            select_server()
    finally:
        listener.close()


def test_a_plain_file_at_the_default_path_is_not_a_server(isolated: Path) -> None:
    default = isolated / "fleet" / "fleet.sock"
    default.parent.mkdir()
    default.write_text("")
    assert select_server() is None


def test_an_ssh_url_selects_a_head_node_server_from_the_option_or_the_environment(
        isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    choice = select_server("ssh://alice@head:2222/srv/fleet.sock")
    assert choice is not None and choice.head_node == HeadNode("head", 2222, "alice")
    assert (choice.socket_path, choice.origin) == (Path("/srv/fleet.sock"), "--server")
    monkeypatch.setenv("FLEET_SERVER", "ssh://head")
    env_choice = select_server()
    assert env_choice is not None and env_choice.head_node == HeadNode("head", 22, None)
    assert (env_choice.socket_path, env_choice.origin) == \
        (Path("/run/fleet/fleet.sock"), "FLEET_SERVER")
    monkeypatch.setenv("FLEET_SERVER", "ssh://head:http")
    with pytest.raises(ConfigError, match=r"^FLEET_SERVER 'ssh://head:http': the port"):
        select_server()


def test_a_server_socket_set_in_the_inventory_is_refused_clients_would_not_see_it(
        isolated: Path, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    inventory = tmp_path / "inv.yaml"
    inventory.write_text("hosts:\n  alpha: {address: 127.0.0.1, port: 1}\nsettings:\n"
                         f"  serve: {{socket: {isolated}/b.sock}}\n")
    env = {**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_DATA_HOME": str(tmp_path / "data"), "FLEET_DB": str(tmp_path / "f.db")}
    served = subprocess.run([sys.executable, "-m", "fleet.cli.main", "-i", str(inventory),
                             "serve"], env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert served.returncode == 2, served.stderr
    assert f"{inventory}:4: serve.socket in the inventory's settings is not seen by clients" \
        in served.stderr
    assert not (isolated / "b.sock").exists()
