"""OpenSSH sshd for namespace hosts: keys, per-host config, start inside a namespace, readiness."""

from __future__ import annotations

import asyncio
import concurrent.futures
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SSHD_PATH = "/usr/sbin/sshd"
SSHD_PACKAGES = (
    "openssh-server (sshd), openssh-client (ssh), iproute2 (ip, tc), util-linux (unshare)"
)
# curve25519 first: sntrup761 costs ~2x CPU per handshake on this box and asyncssh lacks it anyway.
KEX_ALGORITHMS = ",".join(
    [
        "curve25519-sha256",
        "curve25519-sha256@libssh.org",
        "ecdh-sha2-nistp256",
        "diffie-hellman-group14-sha256",
    ]
)
HOST_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class SshTarget:
    """Where and how to reach one sshd, for the readiness check."""

    name: str
    address: str
    port: int


def require_sshd() -> None:
    if not Path(SSHD_PATH).exists():
        raise RuntimeError(f"{SSHD_PATH} missing: install the Debian packages {SSHD_PACKAGES}")


def write_ed25519_key(private_path: Path, comment: str) -> str:
    """Writes an OpenSSH-format private key (mode 0600) and its .pub; returns the public line."""
    key = Ed25519PrivateKey.generate()
    private_bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public_line = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
        + f" {comment}"
    )
    temp_path = private_path.with_suffix(".tmp")
    temp_path.touch(mode=0o600)
    temp_path.chmod(0o600)
    temp_path.write_bytes(private_bytes)
    temp_path.replace(private_path)
    Path(f"{private_path}.pub").write_text(public_line + "\n")
    return public_line


def _setenv_value(name: str, value: str) -> str:
    if '"' in value or "\n" in value:
        raise ValueError(f"SetEnv {name}: value {value!r} cannot be written to sshd_config")
    return f'{name}="{value}"'


def write_sshd_config(
    path: Path,
    *,
    address: str,
    port: int,
    host_key: Path,
    authorized_keys: Path,
    session_env: Mapping[str, str],
) -> None:
    """The per-host config measured to work (LAB-NOTES), plus SetEnv for the host's GPU env."""
    lines = [
        f"ListenAddress {address}:{port}",
        f"HostKey {host_key}",
        "PidFile none",
        f"AuthorizedKeysFile {authorized_keys}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "UsePAM no",
        "StrictModes no",
        "UseDNS no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "MaxStartups 256:30:512",
        "MaxSessions 64",
        "Subsystem sftp internal-sftp",
        f"KexAlgorithms {KEX_ALGORITHMS}",
        "LogLevel INFO",
    ]
    if session_env:
        lines.append("SetEnv " + " ".join(_setenv_value(k, v) for k, v in session_env.items()))
    path.write_text("\n".join(lines) + "\n")


def sshd_command(namespace: str, hostname: str, home: Path, tmp: Path, config: Path) -> list[str]:
    """sshd in the host's namespace with its own hostname, a clean $HOME and a private /tmp.

    `unshare` without --fork and `exec` keep one PID from `ip netns exec` down to sshd itself.
    """
    inner = " && ".join(
        [
            f"hostname {shlex.quote(hostname)}",
            f"mount --bind {shlex.quote(str(home))} /root",
            f"mount --bind {shlex.quote(str(tmp))} /tmp",
            f"exec {SSHD_PATH} -D -e -f {shlex.quote(str(config))}",
        ]
    )
    return [
        "ip",
        "netns",
        "exec",
        namespace,
        "unshare",
        "--uts",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        inner,
    ]


def start_sshd(argv: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # Debian's privilege-separation dir
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, start_new_session=True
        )


async def _verify_one(
    target: SshTarget, user: str, client_key: Path, known_hosts: Path, deadline: float
) -> str:
    import asyncssh  # imported here: the CLI's `down`/`status` should not pay for it

    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            async with asyncssh.connect(
                target.address,
                target.port,
                username=user,
                client_keys=[str(client_key)],
                known_hosts=str(known_hosts),
                config=None,
                connect_timeout=max(0.5, deadline - time.monotonic()),
            ) as connection:
                result = await connection.run("hostname", check=True, timeout=10)
                return str(result.stdout).strip()
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            last_error = exc
            await asyncio.sleep(0.05)
    raise TimeoutError(
        f"{target.name} ({target.address}:{target.port}): sshd not answering: {last_error!r}"
    )


async def _verify_all(
    targets: Sequence[SshTarget], user: str, client_key: Path, known_hosts: Path, timeout_s: float
) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    hostnames = await asyncio.gather(
        *(_verify_one(target, user, client_key, known_hosts, deadline) for target in targets)
    )
    return {target.name: hostname for target, hostname in zip(targets, hostnames, strict=True)}


def verify_hosts(
    targets: Sequence[SshTarget],
    *,
    user: str,
    client_key: Path,
    known_hosts: Path,
    timeout_s: float = 30.0,
) -> dict[str, str]:
    """Logs in to every host over asyncssh (key + known_hosts checked) and returns each hostname.

    Runs its own event loop in a worker thread so it works from sync code and inside a running loop.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
        future = executor.submit(
            asyncio.run, _verify_all(targets, user, client_key, known_hosts, timeout_s)
        )
        return future.result(timeout=timeout_s + 10)
