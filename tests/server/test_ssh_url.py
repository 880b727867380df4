"""`--server ssh://[user@]host[:port][/socket/path]`: what each part means, and every bad URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.client.select import DEFAULT_HEAD_NODE_SOCKET, HeadNode, parse_ssh_server
from fleet.errors import ConfigError


@pytest.mark.parametrize(("url", "head_node", "socket_path"), [
    ("ssh://head", HeadNode("head", 22, None), DEFAULT_HEAD_NODE_SOCKET),
    ("ssh://head/", HeadNode("head", 22, None), DEFAULT_HEAD_NODE_SOCKET),
    ("ssh://bob@head.lab:2200/srv/fleet/fleet.sock",
     HeadNode("head.lab", 2200, "bob"), Path("/srv/fleet/fleet.sock")),
    ("ssh://10.0.0.5:22/run/fleet/fleet.sock", HeadNode("10.0.0.5", 22, None),
     Path("/run/fleet/fleet.sock")),
    ("ssh://root@[fd00::5]:2222/tmp/f.sock", HeadNode("fd00::5", 2222, "root"),
     Path("/tmp/f.sock")),
    ("ssh://[::1]", HeadNode("::1", 22, None), DEFAULT_HEAD_NODE_SOCKET),
])
def test_each_part_of_an_ssh_url(url: str, head_node: HeadNode, socket_path: Path) -> None:
    choice = parse_ssh_server(url, "--server")
    assert (choice.head_node, choice.socket_path, choice.url, choice.origin) == \
        (head_node, socket_path, url, "--server")


def test_the_default_socket_is_the_documented_head_node_path() -> None:
    assert Path("/run/fleet/fleet.sock") == DEFAULT_HEAD_NODE_SOCKET


@pytest.mark.parametrize(("url", "why"), [
    ("ssh://", "no head node host name"),
    ("ssh://:22/x.sock", "no head node host name"),
    ("ssh://alice@", "no head node host name"),
    ("ssh://-oProxyCommand=x", "no head node host name"),
    ("ssh://@head", "empty user name"),
    ("ssh://head:", "empty port"),
    ("ssh://head:0", "the port must be a number from 1 to 65535"),
    ("ssh://head:65536", "the port must be a number from 1 to 65535"),
    ("ssh://head:ssh", "the port must be a number from 1 to 65535"),
    ("ssh://[fd00::5", "Invalid IPv6 URL"),
    ("ssh://head?socket=/x", "no query"),
    ("ssh://head/x.sock#frag", "no query"),
    ("ssh://head/my fleet.sock", "spaces or control characters"),
    ("ssh://head/x\x1b[2J.sock", "spaces or control characters"),
])
def test_a_bad_url_is_a_config_error_naming_the_value_and_its_origin(url: str, why: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_ssh_server(url, "FLEET_SERVER")
    assert str(raised.value).startswith(f"FLEET_SERVER {url!r}: ")
    assert why in str(raised.value)
    assert raised.value.exit_code == 2


def test_a_password_in_the_url_is_refused_without_being_repeated() -> None:
    with pytest.raises(ConfigError, match="passwords are not accepted") as raised:
        parse_ssh_server("ssh://alice:hunter2@head", "--server")
    assert "hunter2" not in str(raised.value)
