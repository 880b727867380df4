"""Host-key policy against real SimSshHosts: unknown refused, accept-new pins, changes refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stat
from dataclasses import replace
from pathlib import Path

import asyncssh
import pytest

from fleet.errors import HostKeyRejected
from fleet.ssh.connect import connect, fetch_host_key
from fleet.ssh.hostkeys import HostKeyPolicy, key_fingerprint
from fleet.ssh.known_hosts import hosts_match
from fleet.ssh.options import SshOptions
from fleet.ssh.run import run_command
from tests.fixtures.sshserver import SimSshHostFactory


async def test_unknown_key_is_refused_with_fingerprint_and_advice(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions
) -> None:
    handle = await sim_ssh_host("newbox")
    with pytest.raises(HostKeyRejected) as caught:
        await connect(handle.spec, sim_ssh_options)
    message = str(caught.value)
    assert caught.value.host == "newbox"
    assert "ssh-ed25519" in message
    assert key_fingerprint(handle.host_key) in message
    assert "verify the fingerprint" in message.lower()
    assert "--accept-new" in message and "~/.ssh/known_hosts" in message
    assert not sim_ssh_options.pinned_hosts_file.exists()


async def test_accept_new_pins_then_plain_connect_works(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions
) -> None:
    handle = await sim_ssh_host("pinme")
    pinned = sim_ssh_options.pinned_hosts_file
    conn = await connect(handle.spec, replace(sim_ssh_options, accept_new=True))
    conn.close()
    assert stat.S_IMODE(pinned.stat().st_mode) == 0o600
    assert stat.S_IMODE(pinned.parent.stat().st_mode) == 0o700
    lines = pinned.read_text().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(handle.known_hosts_line + " ")
    assert lines[0].startswith(f"[127.0.0.1]:{handle.port} ssh-ed25519 ")

    fresh_options = replace(sim_ssh_options)  # a new SshOptions, same pinned file
    again = await connect(handle.spec, fresh_options)
    async with again:
        result = await run_command(again, "echo pinned-ok", host="pinme", timeout=5)
    assert result.stdout == b"pinned-ok\n"
    assert pinned.read_text().splitlines() == lines  # not pinned twice


async def test_changed_key_refused_even_with_accept_new(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions
) -> None:
    # The host at this address and port now presents a new key (reinstalled, or spoofed).
    handle = await sim_ssh_host("moved")
    old_key = asyncssh.generate_private_key("ssh-ed25519")
    old_public = old_key.export_public_key().decode().split()
    unrelated = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()
    pinned = sim_ssh_options.pinned_hosts_file
    pinned.parent.mkdir(mode=0o700, parents=True)
    pinned.write_text(
        "# fleet pins\n"
        f"[127.0.0.1]:1 {unrelated[0]} {unrelated[1]}\n"
        f"[127.0.0.1]:{handle.port} {old_public[0]} {old_public[1]}\n"
    )
    before = pinned.read_text()
    with pytest.raises(HostKeyRejected) as caught:
        await connect(handle.spec, replace(sim_ssh_options, accept_new=True))
    message = str(caught.value)
    assert "HOST KEY CHANGED" in message
    assert f"{pinned}:3" in message
    assert key_fingerprint(handle.host_key) in message and key_fingerprint(old_key) in message
    assert "even with --accept-new" in message
    assert pinned.read_text() == before


async def test_key_in_users_known_hosts_is_accepted(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("listed")
    user_file = tmp_path / "known_hosts"
    user_file.write_text(f"# user's file\n{handle.known_hosts_line}\n")
    conn = await connect(handle.spec, replace(sim_ssh_options, known_hosts_files=(user_file,)))
    conn.close()
    assert not sim_ssh_options.pinned_hosts_file.exists()


async def test_hashed_known_hosts_entry_is_accepted(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("hashed")
    salt = os.urandom(20)
    name = f"[127.0.0.1]:{handle.port}".encode()
    digest = hmac.new(salt, name, hashlib.sha1).digest()
    hashed = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"
    key_part = handle.known_hosts_line.split(" ", 1)[1]
    user_file = tmp_path / "known_hosts"
    user_file.write_text(f"{hashed} {key_part}\n")
    conn = await connect(handle.spec, replace(sim_ssh_options, known_hosts_files=(user_file,)))
    conn.close()


async def test_revoked_key_is_refused(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("revoked")
    user_file = tmp_path / "known_hosts"
    user_file.write_text(f"{handle.known_hosts_line}\n@revoked {handle.known_hosts_line}\n")
    with pytest.raises(HostKeyRejected, match=rf"REVOKED at {user_file}:2"):
        await connect(
            handle.spec, replace(sim_ssh_options, known_hosts_files=(user_file,), accept_new=True)
        )


async def test_malformed_entry_for_host_blocks_pinning(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("damaged")
    user_file = tmp_path / "known_hosts"
    user_file.write_text(f"[127.0.0.1]:{handle.port} ssh-ed25519 not-base64!!\n")
    with pytest.raises(HostKeyRejected, match=rf"{user_file}:1 \(malformed line\)"):
        await connect(
            handle.spec, replace(sim_ssh_options, known_hosts_files=(user_file,), accept_new=True)
        )
    assert not sim_ssh_options.pinned_hosts_file.exists()


async def test_plain_entry_does_not_match_another_port(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("portless")
    user_file = tmp_path / "known_hosts"
    user_file.write_text("127.0.0.1 " + handle.known_hosts_line.split(" ", 1)[1] + "\n")
    with pytest.raises(HostKeyRejected, match="unknown host key"):
        await connect(handle.spec, replace(sim_ssh_options, known_hosts_files=(user_file,)))


async def test_fetch_host_key_reports_type_and_fingerprint(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions
) -> None:
    handle = await sim_ssh_host("adoptee")
    key_type, fingerprint = await fetch_host_key(handle.spec, sim_ssh_options)
    assert key_type == "ssh-ed25519"
    assert fingerprint == key_fingerprint(handle.host_key)
    assert fingerprint.startswith("SHA256:")
    assert not sim_ssh_options.pinned_hosts_file.exists()


@pytest.mark.parametrize(
    ("hosts", "name", "expected"),
    [
        ("10.0.0.5", "10.0.0.5", True),
        ("10.0.0.5", "[10.0.0.5]:2222", False),
        ("[10.0.0.5]:2222", "[10.0.0.5]:2222", True),
        ("gpu*,!gpu9", "gpu1", True),
        ("gpu*,!gpu9", "gpu9", False),
        ("GPU?", "gpu1", True),
        ("[10.0.0.*]:2222", "[10.0.0.7]:2222", True),
        ("[10.0.0.*]:2222", "[10.0.0.7]:22", False),
    ],
)
def test_host_patterns(hosts: str, name: str, expected: bool) -> None:
    assert hosts_match(hosts, name) is expected


async def test_unwritable_pinned_file_refuses_instead_of_accepting(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("nopin")
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the pinned file's directory should be\n")
    options = replace(
        sim_ssh_options, accept_new=True, pinned_hosts_file=blocker / "fleet" / "known_hosts"
    )
    with pytest.raises(HostKeyRejected, match=rf"cannot pin host key ssh-ed25519 .* in {blocker}"):
        await connect(handle.spec, options)


async def test_unreadable_known_hosts_file_refuses(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("unreadable")
    directory_not_file = tmp_path / "known_hosts_dir"
    directory_not_file.mkdir()
    options = replace(sim_ssh_options, known_hosts_files=(directory_not_file,), accept_new=True)
    with pytest.raises(HostKeyRejected, match=rf"cannot read {directory_not_file}"):
        await connect(handle.spec, options)
    assert not sim_ssh_options.pinned_hosts_file.exists()


def test_known_key_type_is_negotiated_first(tmp_path: Path) -> None:
    rsa = asyncssh.generate_private_key("ssh-rsa", key_size=2048).export_public_key().decode()
    user_file = tmp_path / "known_hosts"
    user_file.write_text("gpu7 " + " ".join(rsa.split()[:2]) + "\n")
    options = SshOptions(
        known_hosts_files=(user_file,),
        pinned_hosts_file=tmp_path / "pinned",
        ssh_config_files=(),
    )
    known = HostKeyPolicy("gpu7", "gpu7", 22, options).server_host_key_algs()
    unknown = HostKeyPolicy("gpu8", "gpu8", 22, options).server_host_key_algs()
    assert known[0].startswith("rsa-sha2-")
    assert unknown[0] == "ssh-ed25519"
