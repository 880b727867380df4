"""Each fault control breaks one host the way a real failure would, and reverses cleanly."""

from __future__ import annotations

import asyncio
import time

import asyncssh
import pytest

from tests.cluster.clients import asyncssh_run, openssh_run
from tests.cluster.hosts import ClusterHostSpec
from tests.cluster.netcluster import Cluster
from tests.cluster.netns import FaultUnavailable
from tests.fixtures.cluster import AnyCluster, ClusterFactory

pytestmark = pytest.mark.root
SHORT_CONNECT_TIMEOUT_S = 1.5


async def three_hosts(factory: ClusterFactory, prefix: str) -> AnyCluster:
    return await factory([ClusterHostSpec(f"{prefix}{index}") for index in range(3)])


async def hostname_of(built: AnyCluster, index: int) -> str:
    status, stdout, stderr = await asyncssh_run(
        built.hosts[index],
        built.known_hosts_file,
        "hostname",
        connect_timeout_s=SHORT_CONNECT_TIMEOUT_S,
    )
    assert status == 0, stderr
    return stdout.strip()


async def others_answer(built: AnyCluster) -> None:
    names = await asyncio.gather(*(hostname_of(built, index) for index in (1, 2)))
    assert names == [built.hosts[1].name, built.hosts[2].name]


async def test_link_down_makes_only_that_host_unreachable(netns_cluster: ClusterFactory) -> None:
    built = await three_hosts(netns_cluster, "link")
    built.hosts[0].link_down()
    started = time.monotonic()
    with pytest.raises((OSError, asyncio.TimeoutError)):
        await hostname_of(built, 0)
    assert time.monotonic() - started < SHORT_CONNECT_TIMEOUT_S + 1.0
    await others_answer(built)
    built.hosts[0].link_up()
    assert await hostname_of(built, 0) == "link0"


async def test_killed_sshd_refuses_then_restarts(netns_cluster: ClusterFactory) -> None:
    built = await three_hosts(netns_cluster, "kill")
    assert isinstance(built, Cluster)
    killed_pid = built.hosts[0].sshd_record.pid if built.hosts[0].sshd_record else None
    built.hosts[0].kill_sshd()
    with pytest.raises(ConnectionRefusedError):
        await hostname_of(built, 0)
    await others_answer(built)
    # The state file follows: the killed sshd is no longer recorded, the new one is.
    assert killed_pid not in [process.pid for process in built.state.processes]
    built.hosts[0].start_sshd()
    assert await hostname_of(built, 0) == "kill0"
    assert built.hosts[0].sshd_record is not None
    assert built.hosts[0].sshd_record.pid in [process.pid for process in built.state.processes]


async def test_frozen_sshd_times_out_then_thaws(netns_cluster: ClusterFactory) -> None:
    built = await three_hosts(netns_cluster, "frz")
    built.hosts[0].freeze_sshd()
    started = time.monotonic()
    # TCP is accepted by the kernel, but no SSH banner ever comes: only the timeout ends it.
    with pytest.raises(asyncio.TimeoutError):
        await hostname_of(built, 0)
    assert time.monotonic() - started >= SHORT_CONNECT_TIMEOUT_S - 0.1
    await others_answer(built)
    built.hosts[0].thaw_sshd()
    assert await hostname_of(built, 0) == "frz0"


async def test_netem_delay_is_measurable(netns_cluster: ClusterFactory) -> None:
    built = await netns_cluster([ClusterHostSpec("slow0")])
    host = built.hosts[0]
    try:
        host.netem(delay_ms=0)
    except FaultUnavailable as exc:
        pytest.skip(str(exc))

    async def round_trip_seconds() -> float:
        async with asyncssh.connect(
            host.address,
            username=host.user,
            client_keys=[str(host.identity_file)],
            known_hosts=str(built.known_hosts_file),
            config=None,
            connect_timeout=10,
        ) as connection:
            await connection.run("true", check=True, timeout=10)
            started = time.monotonic()
            await connection.run("true", check=True, timeout=10)
            return time.monotonic() - started

    baseline = await round_trip_seconds()
    host.netem(delay_ms=200)
    delayed = await round_trip_seconds()
    host.clear_netem()
    restored = await round_trip_seconds()
    # One exec round trip crosses the host's egress several times; at least one 200 ms delay.
    assert delayed >= baseline + 0.2
    assert restored < delayed - 0.15


async def test_rotated_host_key_no_longer_matches_known_hosts(
    netns_cluster: ClusterFactory,
) -> None:
    built = await three_hosts(netns_cluster, "rot")
    old_line = built.hosts[0].known_hosts_line
    new_line = built.hosts[0].rotate_host_key()
    assert new_line != old_line and new_line.split()[0] == old_line.split()[0]
    assert old_line in built.known_hosts_file.read_text()  # the client's file still has the old key
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        await hostname_of(built, 0)
    refused = openssh_run(built.hosts[0], built.known_hosts_file, "hostname")
    assert refused.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in refused.stderr
    await others_answer(built)
    built.write_client_files()  # the operator accepts the new key
    assert await hostname_of(built, 0) == "rot0"
    assert openssh_run(built.hosts[0], built.known_hosts_file, "hostname").stdout == "rot0\n"


async def test_crash_kills_everything_and_reboot_comes_back_clean(
    netns_cluster: ClusterFactory,
) -> None:
    built = await three_hosts(netns_cluster, "boot")
    host = built.hosts[0]
    status, stdout, _ = await asyncssh_run(
        host,
        built.known_hosts_file,
        "touch /tmp/before ~/kept; setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!",
    )
    assert status == 0
    task_pid = int(stdout)
    assert task_pid in host.processes()
    host.crash()
    assert host.processes() == []
    with pytest.raises(ConnectionRefusedError):
        await hostname_of(built, 0)
    await others_answer(built)
    host.reboot()
    status, stdout, _ = await asyncssh_run(host, built.known_hosts_file, "ls /tmp ~")
    # /tmp is emptied by a reboot; the home directory (a disk) keeps its files.
    assert (status, stdout) == (0, "/root:\nkept\n\n/tmp:\n")
