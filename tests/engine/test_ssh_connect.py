"""connect() + run_command() against a real SimSshHost: output, stdin, status, timeouts, cleanup."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fleet.errors import HostUnreachable
from fleet.model import HostSpec
from fleet.ssh.connect import connect, fetch_host_key, host_text
from fleet.ssh.hostkeys import key_fingerprint
from fleet.ssh.options import SshOptions
from fleet.ssh.run import CommandTimedOut, run_command
from tests.fixtures.sshserver import SimHostHandle, SimSshHostFactory


def trust(options: SshOptions, tmp_path: Path, *handles: SimHostHandle) -> SshOptions:
    """Options whose user known_hosts file lists the given hosts."""
    known_hosts = tmp_path / "user_known_hosts"
    known_hosts.write_text("".join(handle.known_hosts_line + "\n" for handle in handles))
    return replace(options, known_hosts_files=(known_hosts,))


def host_block(pattern: str, *directives: str) -> str:
    """An ssh config `Host PATTERN` block with these directives, one per line."""
    return f"Host {pattern}\n" + "".join(f"  {directive}\n" for directive in directives)


def trust_with_ssh_config(options: SshOptions, tmp_path: Path, config_text: str,
                          *handles: SimHostHandle) -> SshOptions:
    """trust(), and an ssh config file (tmp_path/ssh_config) holding `config_text`."""
    config = tmp_path / "ssh_config"
    config.write_text(config_text)
    return replace(trust(options, tmp_path, *handles), ssh_config_files=(config,))



def trust_with_host_config(options: SshOptions, tmp_path: Path, handle: SimHostHandle,
                           *directives: str) -> SshOptions:
    """trust_with_ssh_config() for one host, its config a `Host ADDRESS` block of these."""
    return trust_with_ssh_config(
        options, tmp_path, host_block(handle.spec.address, *directives), handle)

async def assert_logs_in(spec: HostSpec, options: SshOptions) -> None:
    """connect() as `spec` and run `echo hi` over the connection, which is then closed."""
    conn = await connect(spec, options)
    try:
        assert (await conn.run("echo hi", check=True)).stdout == b"hi\n"
    finally:
        conn.close()


def process_gone(pid: int) -> bool:
    """True when `pid` no longer exists or is a zombie (reaped lazily on this VM)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def wait_gone(pid: int, deadline_s: float = 5.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if process_gone(pid):
            return True
        await asyncio.sleep(0.05)
    return process_gone(pid)


async def test_run_command_output_env_and_status(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("alpha", env={"FLEET_SIM_NVML_CONFIG": "/x/gpus.json"})
    conn = await connect(handle.spec, trust(sim_ssh_options, tmp_path, handle))
    async with conn:
        result = await run_command(
            conn,
            'echo "$FLEET_SIM_NVML_CONFIG"; pwd; echo oops >&2; exit 7',
            host="alpha",
            timeout=5,
        )
    assert result.exit_status == 7
    assert result.stdout == f"/x/gpus.json\n{handle.host.home}\n".encode()
    assert result.stderr == b"oops\n"


async def test_stdin_is_piped_and_closed(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("beta")
    conn = await connect(handle.spec, trust(sim_ssh_options, tmp_path, handle))
    async with conn:
        payload = bytes(range(256)) * 1000
        echoed = await run_command(conn, "cat", host="beta", input=payload, timeout=5)
        program = b"import sys\nprint(sum(int(x) for x in sys.argv[1:]) + 1)\n"
        python = await run_command(conn, "python3 - 20 21", host="beta", input=program, timeout=5)
        empty = await run_command(conn, "cat; echo done", host="beta", timeout=5)
    assert echoed.exit_status == 0 and echoed.stdout == payload
    assert python.stdout == b"42\n"
    assert empty.stdout == b"done\n"


async def test_command_killed_by_signal_reports_signal(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("gamma")
    conn = await connect(handle.spec, trust(sim_ssh_options, tmp_path, handle))
    async with conn:
        result = await run_command(conn, "kill -TERM $$", host="gamma", timeout=5)
    assert result.exit_status is None
    assert result.exit_signal == "TERM"


async def test_command_timeout_keeps_partial_output(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("delta")
    conn = await connect(handle.spec, trust(sim_ssh_options, tmp_path, handle))
    async with conn:
        started = time.monotonic()
        with pytest.raises(CommandTimedOut) as caught:
            await run_command(conn, "echo partial; sleep 30", host="delta", timeout=3.0)
        elapsed = time.monotonic() - started
        # The connection stays usable after a timed-out command.
        after = await run_command(conn, "echo still-here", host="delta", timeout=5)
    assert elapsed < 15  # the command sleeps 30 s: the 3 s timeout ended it
    assert isinstance(caught.value, HostUnreachable)
    assert caught.value.stdout == b"partial\n"
    assert "timed out after 3s" in str(caught.value)
    assert "partial" in str(caught.value)
    assert after.stdout == b"still-here\n"


async def test_closed_channel_kills_process_group(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("eps")
    conn = await connect(handle.spec, trust(sim_ssh_options, tmp_path, handle))
    async with conn:
        process = await conn.create_process("sleep 1000 & echo $!; wait", encoding=None)
        line = await asyncio.wait_for(process.stdout.readline(), 5)
        sleeper = int(line)
        assert not process_gone(sleeper)
        process.close()
        assert await wait_gone(sleeper), f"sleep {sleeper} survived its channel"


async def test_stop_kills_every_child(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("zeta")
    conn = await connect(handle.spec, trust(sim_ssh_options, tmp_path, handle))
    running = await conn.create_process("sleep 1000 & echo $!; wait", encoding=None)
    sleeper = int(await asyncio.wait_for(running.stdout.readline(), 5))
    # A finished command that left a background job behind (OpenSSH would keep it too).
    leftover = await run_command(
        conn, "sleep 1000 >/dev/null 2>&1 & echo $!", host="zeta", timeout=5
    )
    orphan = int(leftover.stdout)
    shells = list(handle.host.started_pids)
    assert not process_gone(sleeper) and not process_gone(orphan)
    started = time.monotonic()
    await handle.host.stop()
    assert time.monotonic() - started < 5
    for pid in (sleeper, orphan, *shells):
        assert await wait_gone(pid), f"pid {pid} survived SimSshHost.stop()"
    conn.close()


async def test_sftp_round_trip(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("eta")
    conn = await connect(handle.spec, trust(sim_ssh_options, tmp_path, handle))
    target = handle.host.home / "uploaded.txt"
    async with conn, conn.start_sftp_client() as sftp:
        async with sftp.open(str(target), "wb") as remote:
            await remote.write(b"payload\n")
        assert await sftp.exists(str(target))
    assert target.read_bytes() == b"payload\n"


async def test_proxy_jump_through_a_sim_host(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    bastion = await sim_ssh_host("bastion")
    inner = await sim_ssh_host("inner")
    # The jump hop's key comes from ssh config, as it would for a real bastion.
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"Host 127.0.0.1\n  IdentityFile {bastion.spec.identity_file}\n")
    options = replace(
        trust(sim_ssh_options, tmp_path, bastion, inner), ssh_config_files=(ssh_config,)
    )
    spec = replace(inner.spec, proxy_jump=host_text(bastion.spec))
    conn = await connect(spec, options)
    async with conn:
        result = await run_command(conn, "echo via-jump", host="inner", timeout=5)
    assert result.stdout == b"via-jump\n"
    assert await fetch_host_key(spec, options) == (
        "ssh-ed25519",
        key_fingerprint(inner.host_key),
    )
    # The jump connection was served by the bastion.
    assert inner.host.started_pids and bastion.host.started_pids == []


async def test_pinned_and_env_from_os_do_not_leak(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("theta", env={"ONLY_HERE": "1"})
    other = await sim_ssh_host("iota")
    options = trust(sim_ssh_options, tmp_path, handle, other)
    first = await connect(handle.spec, options)
    second = await connect(other.spec, options)
    async with first, second:
        mine = await run_command(first, "echo ${ONLY_HERE:-unset}", host="theta", timeout=5)
        theirs = await run_command(second, "echo ${ONLY_HERE:-unset}", host="iota", timeout=5)
    assert (mine.stdout, theirs.stdout) == (b"1\n", b"unset\n")
    assert os.environ.get("ONLY_HERE") is None
