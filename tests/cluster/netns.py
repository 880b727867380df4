"""Network plumbing for namespace hosts: one bridge, a veth per host, links, netem, teardown."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

SUBNET_PREFIX = "10.213"  # 10.213.<index>.0/24: a /24 per 240 hosts, only on its run's bridge
CONTROLLER_HOST_OCTET = 1
FIRST_HOST_OCTET = 11
HOSTS_PER_SUBNET = 240
MAX_SUBNETS_PER_RUN = 2  # consecutive /24s on one bridge: up to 480 hosts
MAX_HOSTS = HOSTS_PER_SUBNET * MAX_SUBNETS_PER_RUN
IP_TIMEOUT_S = 30.0
NETEM_MISSING = "kernel lacks sch_netem (CONFIG_NET_SCH_NETEM): no delay/loss injection"


class FaultUnavailable(RuntimeError):
    """A fault control cannot work here (not root, or the kernel lacks a feature); says why."""


@dataclass(frozen=True)
class HostLink:
    """One host's network identity: its namespace, the root-side veth end, its address."""

    namespace: str
    veth: str
    address: str


def bridge_name(run_id: str) -> str:
    return f"fc{run_id}br"


def namespace_name(run_id: str, index: int) -> str:
    return f"fc-{run_id}-{index}"


def veth_name(run_id: str, index: int) -> str:
    return f"fc{run_id}v{index}"


def used_subnet_indexes() -> set[int]:
    """Third octets of 10.213.x.0/24 already on some interface of this machine."""
    output = run_ip(["-4", "-o", "addr", "show"], capture=True)
    used = set()
    for word in output.split():
        if word.startswith(SUBNET_PREFIX + "."):
            used.add(int(word.split(".")[2]))
    return used


def subnets_for(host_count: int) -> int:
    """How many consecutive /24s a run of host_count hosts spans (at least one)."""
    return max(1, -(-host_count // HOSTS_PER_SUBNET))


def pick_subnet_index(also_taken: Iterable[int], width: int = 1) -> int:
    """The first third octet where `width` consecutive /24s are free on this machine."""
    taken = used_subnet_indexes() | set(also_taken)
    for index in range(256 - width + 1):
        if taken.isdisjoint(range(index, index + width)):
            return index
    raise RuntimeError(
        f"all {SUBNET_PREFIX}.x.0/24 test subnets are in use; run `python -m tests.cluster down`"
    )


def controller_address(subnet_index: int) -> str:
    return f"{SUBNET_PREFIX}.{subnet_index}.{CONTROLLER_HOST_OCTET}"


def host_address(subnet_index: int, index: int) -> str:
    """Host `index`'s address: 240 hosts per /24, then on into the run's next /24."""
    if not 0 <= index < MAX_HOSTS:
        raise ValueError(f"host index {index} outside 0..{MAX_HOSTS - 1}")
    subnet, offset = divmod(index, HOSTS_PER_SUBNET)
    return f"{SUBNET_PREFIX}.{subnet_index + subnet}.{FIRST_HOST_OCTET + offset}"


def run_ip(args: Sequence[str], *, stdin: str | None = None, capture: bool = False) -> str:
    """Runs `ip ARGS`; raises with ip's own message on failure."""
    completed = subprocess.run(
        ["ip", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=IP_TIMEOUT_S,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {completed.stderr.strip()}")
    return completed.stdout if capture else ""


def create_network(bridge: str, subnet_index: int, links: Sequence[HostLink]) -> None:
    """Bridge + namespaces + veths in one `ip -batch`, then each namespace's inside in parallel."""
    batch = [f"link add {bridge} type bridge mcast_snooping 0"]
    # The controller's address in each /24 the hosts use; the first is the one tests name.
    batch += [f"addr add {controller_address(subnet_index + subnet)}/24 dev {bridge}"
              for subnet in range(subnets_for(len(links)))]
    batch.append(f"link set {bridge} up")
    for link in links:
        batch += [
            f"netns add {link.namespace}",
            f"link add {link.veth} type veth peer name eth0 netns {link.namespace}",
            f"link set {link.veth} master {bridge} up",
        ]
    run_ip(["-batch", "-"], stdin="\n".join(batch) + "\n")
    inside_jobs = []
    for link in links:
        inside = (
            "link set lo up\n"
            f"addr add {link.address}/24 dev eth0\n"
            "link set eth0 up\n"
            "route add 224.0.0.0/4 dev eth0\n"
        )
        job = subprocess.Popen(
            ["ip", "-n", link.namespace, "-batch", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        inside_jobs.append((link, job, inside))
    for link, job, inside in inside_jobs:
        _, stderr = job.communicate(inside, timeout=IP_TIMEOUT_S)
        if job.returncode != 0:
            raise RuntimeError(f"configuring namespace {link.namespace} failed: {stderr.strip()}")


def namespace_inode(namespace: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{namespace}").st_ino
    except FileNotFoundError:
        return None


def namespace_pids(namespaces: Iterable[str]) -> list[int]:
    """PIDs of every process inside these namespaces (one /proc scan, like `ip netns pids`)."""
    return pids_in({inode for ns in namespaces if (inode := namespace_inode(ns)) is not None})


def pids_in(inodes: set[int]) -> list[int]:
    """PIDs of every process in the network namespaces with these inodes: found by inode, so
    also after `ip netns del` removed their names while a process still holds one."""
    if not inodes:
        return []
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.stat(entry / "ns" / "net").st_ino in inodes:
                pids.append(int(entry.name))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return pids


def kill_pids(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def list_namespaces() -> list[str]:
    """Names of all named network namespaces (`ip netns list`)."""
    netns_dir = Path("/run/netns")
    return sorted(entry.name for entry in netns_dir.iterdir()) if netns_dir.is_dir() else []


def list_links() -> list[str]:
    """Names of all interfaces in this namespace."""
    return sorted(entry.name for entry in Path("/sys/class/net").iterdir())


def existing_links(names: Iterable[str]) -> list[str]:
    return [name for name in names if Path(f"/sys/class/net/{name}").exists()]


def existing_namespaces(names: Iterable[str]) -> list[str]:
    return [name for name in names if Path(f"/run/netns/{name}").exists()]


def destroy_network(
    bridge: str | None, namespaces: Sequence[str], veths: Sequence[str], *, timeout_s: float = 15.0
) -> None:
    """Kills what runs inside the namespaces, deletes them and the bridge, waits for veths to go."""
    inodes = {inode for ns in namespaces if (inode := namespace_inode(ns)) is not None}
    kill_pids(pids_in(inodes))
    batch = [f"netns del {ns}" for ns in existing_namespaces(namespaces)]
    # Deleting a veth's host end removes the pair at once, instead of when the kernel gets
    # round to freeing the namespace that holds the other end (seconds on a loaded machine).
    links = [*veths, *([bridge] if bridge else [])]
    batch += [f"link del {name}" for name in existing_links(links)]
    if batch:
        # -force: keep going past an entry that vanished meanwhile; leftovers are checked below.
        subprocess.run(
            ["ip", "-force", "-batch", "-"],
            input="\n".join(batch) + "\n",
            capture_output=True,
            text=True,
            timeout=IP_TIMEOUT_S,
            check=False,
        )
    # A namespace's veth goes away asynchronously, once the last process in it has exited.
    deadline = time.monotonic() + timeout_s
    while True:
        leftover = existing_links(links) + existing_namespaces(namespaces)
        if not leftover:
            return
        # A process forked after the first scan keeps its namespace, and the veth in it, alive
        # after the name is gone: found by the inode recorded before the delete.
        stragglers = pids_in(inodes)
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"test-cluster teardown: still present after {timeout_s} s: {leftover}"
                f" (processes still inside: {stragglers})"
            )
        kill_pids(stragglers)
        time.sleep(0.02)


def set_link(veth: str, *, up: bool) -> None:
    run_ip(["link", "set", veth, "up" if up else "down"])


def netns_exec(namespace: str) -> list[str]:
    return ["ip", "netns", "exec", namespace]


_netem_reason: list[str | None] = []


def netem_unavailable_reason(namespace: str) -> str | None:
    """None when netem works here (checked once, on a real host interface), else why it cannot."""
    if not _netem_reason:
        completed = subprocess.run(
            [
                *netns_exec(namespace),
                "tc",
                "qdisc",
                "replace",
                "dev",
                "eth0",
                "root",
                "netem",
                "delay",
                "0ms",
            ],
            capture_output=True,
            text=True,
            timeout=IP_TIMEOUT_S,
            check=False,
        )
        if completed.returncode == 0:
            clear_netem(namespace)
            _netem_reason.append(None)
        else:
            _netem_reason.append(f"{NETEM_MISSING} ({completed.stderr.strip()})")
    return _netem_reason[0]


def set_netem(namespace: str, *, delay_ms: float = 0.0, loss_pct: float = 0.0) -> None:
    """Delay and/or drop packets leaving the host (so both directions of a TCP exchange feel it)."""
    reason = netem_unavailable_reason(namespace)
    if reason:
        raise FaultUnavailable(reason)
    argv = [*netns_exec(namespace), "tc", "qdisc", "replace", "dev", "eth0", "root", "netem"]
    argv += ["delay", f"{delay_ms}ms", "loss", f"{loss_pct}%"]
    completed = subprocess.run(
        argv, capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{namespace}: tc netem failed: {completed.stderr.strip()}")


def clear_netem(namespace: str) -> None:
    subprocess.run(
        [*netns_exec(namespace), "tc", "qdisc", "del", "dev", "eth0", "root"],
        capture_output=True,
        timeout=IP_TIMEOUT_S,
        check=False,  # "no qdisc to delete" is the state we want
    )
