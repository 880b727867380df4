"""Client keys (an inventory's identity file, what an ssh config names, the defaults) are
loaded once per process, not once or more per connection."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncssh
import asyncssh.connection
import pytest

from fleet.errors import AuthFailed
from fleet.ssh import client_keys
from fleet.ssh.client_keys import identity_keypairs
from fleet.ssh.connect import connect
from fleet.ssh.file_memo import FileMemo
from fleet.ssh.options import SshOptions
from tests.engine.test_ssh_connect import (
    host_block,
    trust,
    trust_with_host_config,
    trust_with_ssh_config,
)
from tests.fixtures.sshserver import SimSshHostFactory, SshKeys


def _counting(
    monkeypatch: pytest.MonkeyPatch, module: Any, calls: list[object]
) -> Callable[..., Sequence[asyncssh.SSHKeyPair]]:
    real = module.load_keypairs

    def load_keypairs(keylist: object, *args: object, **kwargs: object) -> Any:
        calls.append(keylist)
        return real(keylist, *args, **kwargs)

    monkeypatch.setattr(module, "load_keypairs", load_keypairs)
    return real


def _from_paths(calls: list[object]) -> list[object]:
    """The calls that gave asyncssh paths to read (not key pairs already loaded)."""
    return [
        keylist
        for keylist in calls
        if isinstance(keylist, (str, Path))
        or (isinstance(keylist, list) and any(isinstance(k, (str, Path)) for k in keylist))
    ]


async def test_connections_share_one_load_of_the_identity_file(
    sim_ssh_host: SimSshHostFactory,
    sim_ssh_options: SshOptions,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = await sim_ssh_host("keys-a")
    second = await sim_ssh_host("keys-b")
    options = trust(sim_ssh_options, tmp_path, first, second)
    monkeypatch.setattr(client_keys, "_loaded", FileMemo())
    monkeypatch.setattr(client_keys, "_defaults", FileMemo())
    ours: list[object] = []
    inside_asyncssh: list[object] = []
    _counting(monkeypatch, client_keys.asyncssh, ours)
    _counting(monkeypatch, asyncssh.connection, inside_asyncssh)
    for handle in (first, second, first):
        conn = await connect(handle.spec, options)
        result = await conn.run("echo hi", check=True)
        assert result.stdout == b"hi\n"
        conn.close()
    assert len(ours) == 1, ours
    assert _from_paths(inside_asyncssh) == [], "asyncssh loaded the key from its path again"


def test_a_changed_identity_file_is_loaded_again(tmp_path: Path) -> None:
    path = tmp_path / "id_ed25519"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(path))
    loaded = identity_keypairs(str(path))
    assert identity_keypairs(str(path)) is loaded  # unchanged: the same pairs
    replacement = asyncssh.generate_private_key("ssh-ed25519")
    replacement.write_private_key(str(path))
    (again,) = identity_keypairs(str(path))
    assert again.public_data == replacement.public_data
    path.unlink()
    with pytest.raises(FileNotFoundError):
        identity_keypairs(str(path))


async def test_a_missing_identity_file_still_fails_the_login_with_its_name(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("nokey")
    spec = replace(handle.spec, identity_file=str(tmp_path / "absent_key"))
    with pytest.raises(AuthFailed, match="absent_key"):
        await connect(spec, trust(sim_ssh_options, tmp_path, handle))


@pytest.fixture
def ssh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HOME with ~/.ssh, no ssh-agent, and no keys loaded before by this process."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setattr(client_keys, "_defaults", FileMemo())
    return home


async def test_default_keys_are_loaded_once_where_no_ssh_config_names_keys(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, ssh_keys: SshKeys, ssh_home: Path,
) -> None:
    shutil.copy(ssh_keys.private_path, ssh_home / ".ssh" / "id_ed25519")
    shutil.copy(ssh_keys.public_path, ssh_home / ".ssh" / "id_ed25519.pub")
    first = await sim_ssh_host("defaults-a")
    second = await sim_ssh_host("defaults-b")
    options = trust_with_ssh_config(
        sim_ssh_options, tmp_path, host_block("elsewhere", "IdentityFile ~/.ssh/id_other"),
        first, second)
    ours = _counting_defaults(monkeypatch, client_keys)
    inside_asyncssh = _counting_defaults(monkeypatch, asyncssh.connection)
    for handle in (first, second, first):
        conn = await connect(replace(handle.spec, identity_file=None), options)
        assert (await conn.run("echo hi", check=True)).stdout == b"hi\n"
        conn.close()
    assert ours == [1], "the default keys were not loaded exactly once"
    assert inside_asyncssh == [], "asyncssh loaded the default keys again"


async def test_keys_an_ssh_config_names_are_loaded_once_instead_of_the_defaults(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, ssh_keys: SshKeys, ssh_home: Path,
) -> None:
    first = await sim_ssh_host("configured-a")
    second = await sim_ssh_host("configured-b")
    options = trust_with_ssh_config(
        sim_ssh_options, tmp_path,
        host_block(first.spec.address, f"IdentityFile {ssh_keys.private_path}"), first, second)
    monkeypatch.setattr(client_keys, "_configured", FileMemo())
    defaults = _counting_defaults(monkeypatch, client_keys)
    ours: list[object] = []
    inside_asyncssh: list[object] = []
    _counting(monkeypatch, client_keys.asyncssh, ours)
    _counting(monkeypatch, asyncssh.connection, inside_asyncssh)
    for handle in (first, second, first):  # both answer at the same address: one Host block
        conn = await connect(replace(handle.spec, identity_file=None), options)
        assert (await conn.run("echo hi", check=True)).stdout == b"hi\n"
        conn.close()
    assert defaults == [], "the ssh config's IdentityFile must win over the default keys"
    assert ours == [[str(ssh_keys.private_path)]], "the configured key was not loaded once"
    assert _from_paths(inside_asyncssh) == [], "asyncssh loaded the key from its path again"


def test_configured_keys_load_as_asyncssh_loads_them(tmp_path: Path) -> None:
    """Encrypted keys are skipped (left to the agent); with IdentitiesOnly an IdentityFile
    holding a public key (an agent key's) is skipped, without it refused; an edited file is
    loaded again; a missing one is skipped, and none present is an error."""
    plain = tmp_path / "id_plain"
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(plain))
    locked = tmp_path / "id_locked"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(
        str(locked), format_name="pkcs8-pem", passphrase="secret")  # no bcrypt needed
    public_only = tmp_path / "id_agent.pub"
    asyncssh.generate_private_key("ssh-ed25519").write_public_key(str(public_only))
    paths = [str(plain), str(locked)]
    (loaded,) = client_keys.config_keypairs(paths, False)
    assert loaded.public_data == key.public_data
    assert client_keys.config_keypairs(paths, False)[0] is loaded  # unchanged: kept
    assert len(client_keys.config_keypairs([str(plain), str(public_only)], True)) == 1
    with pytest.raises(asyncssh.KeyImportError):
        client_keys.config_keypairs([str(plain), str(public_only)], False)
    replacement = asyncssh.generate_private_key("ssh-ed25519")
    replacement.write_private_key(str(plain))
    assert client_keys.config_keypairs(paths, False)[0].public_data == replacement.public_data
    absent = str(tmp_path / "absent")
    assert client_keys.config_keypairs([absent, *paths], False)[0].public_data == \
        replacement.public_data
    with pytest.raises(FileNotFoundError, match=r"absent, \S*/gone"):
        client_keys.config_keypairs([absent, str(tmp_path / "gone")], False)


async def test_a_certificate_file_leaves_the_host_s_keys_to_asyncssh(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, ssh_keys: SshKeys, ssh_home: Path,
) -> None:
    """asyncssh pairs a CertificateFile with the keys itself; fleet does not preload them."""
    handle = await sim_ssh_host("certified")
    options = trust_with_host_config(
        sim_ssh_options, tmp_path, handle, f"IdentityFile {ssh_keys.private_path}",
        f"CertificateFile {tmp_path / 'no-such-cert.pub'}")
    ours: list[object] = []
    _counting(monkeypatch, client_keys.asyncssh, ours)
    with pytest.raises(AuthFailed, match="no-such-cert"):
        await connect(replace(handle.spec, identity_file=None), options)
    assert ours == []


def _counting_defaults(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[int]:
    calls: list[int] = []
    real = module.load_default_keypairs

    def load_default_keypairs(*args: object, **kwargs: object) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "load_default_keypairs", load_default_keypairs)
    return calls
