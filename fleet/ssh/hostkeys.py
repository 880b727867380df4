"""Host-key policy: verify against known_hosts files and fleet's pinned file, pin on request.

Files are in OpenSSH known_hosts format. A host is looked up as `addr` when its port is 22 and
as `[addr]:port` otherwise (OpenSSH's rule: a plain entry does not match another port), or by
its ssh config HostKeyAlias where it has one (then the alias alone, as OpenSSH does). The files
read are the ones OpenSSH would read for the host (UserKnownHostsFile and GlobalKnownHostsFile,
by default ~/.ssh/known_hosts{,2} and /etc/ssh/ssh_known_hosts{,2}; see host_options), plus
fleet's pinned file; a key pinned with accept_new is pinned under the same name. Plain
and hashed (`|1|salt|hash`) host fields and `!negated`, `*`, `?` patterns are understood;
`@revoked` lines reject a key; `@cert-authority` lines are ignored (host certificates are not
supported, so such hosts are "unknown"). fleet writes its pinned entries unhashed, so the
operator can read and prune the file; addresses in an inventory are not secret.

Decision for a presented key:
  revoked anywhere                         -> refused
  equal to an entry for this host          -> accepted
  host has entries, none equal             -> CHANGED: refused, even with accept_new
  host has no entries, accept_new          -> pinned (appended, 0600) and accepted
  host has no entries                      -> refused with the fingerprint and what to do
A malformed line whose host field matches counts as an entry that matches no key, so a damaged
file can never turn a changed key into a silently pinned one.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import asyncssh
from asyncssh.public_key import decode_ssh_public_key, get_default_public_key_algs

from fleet.ssh.known_hosts import (
    KnownHostsEntry,
    hosts_match,
    matching_entries,
    read_known_hosts,
)
from fleet.ssh.options import SshOptions

ACCEPT_NEW_HINT = "--accept-new"

# For a host with no known key, prefer the key OpenSSH would show (asyncssh lists RSA first),
# so the fingerprint an operator verifies matches `ssh-keygen -lf ssh_host_ed25519_key.pub`.
_PREFERRED_HOST_KEY_ALGS = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "rsa-sha2-512",
    "rsa-sha2-256",
)


def host_field(address: str, port: int) -> str:
    """How a host is named in a known_hosts file: `addr` for port 22, else `[addr]:port`."""
    return address if port == 22 else f"[{address}]:{port}"


def blob_fingerprint(blob: bytes) -> str:
    """OpenSSH SHA256 fingerprint of a public key blob."""
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii").rstrip("=")
    return f"SHA256:{digest}"


def key_fingerprint(key: asyncssh.SSHKey) -> str:
    """OpenSSH SHA256 fingerprint of a key."""
    return blob_fingerprint(key.public_data)


def key_type_name(key: asyncssh.SSHKey) -> str:
    """The key's type as written in known_hosts, e.g. `ssh-ed25519`."""
    return key.get_algorithm()


def _describe(entry: KnownHostsEntry) -> str:
    if entry.key_blob is None:
        return f"{entry.where} (malformed line)"
    return f"{entry.where} ({entry.key_type} {blob_fingerprint(entry.key_blob)})"


class HostKeyPolicy:
    """The host-key decision for one host (address, port), made from files read once."""

    def __init__(
        self,
        name: str,
        address: str,
        port: int,
        options: SshOptions,
        *,
        lookup_name: str | None = None,
        known_hosts_files: Sequence[Path] | None = None,
    ) -> None:
        """`lookup_name`: the name the files list the host by (default `host_field(address,
        port)`); `known_hosts_files`: OpenSSH's files to read for it (default the options'
        user and system-wide files); fleet's pinned file is read in either case."""
        self.name = name
        self.address = address
        self.port = port
        self.options = options
        self.lookup_name = lookup_name or host_field(address, port)
        if known_hosts_files is None:
            known_hosts_files = [*options.known_hosts_files, *options.global_known_hosts_files]
        self.files = list(dict.fromkeys([*known_hosts_files, options.pinned_hosts_file]))
        self.entries: list[KnownHostsEntry] = []
        # A file that exists but cannot be read might vouch against this key: refuse then.
        self.unreadable: list[str] = []
        for path in self.files:
            try:
                found = matching_entries(path, self.lookup_name)
            except OSError as exc:
                self.unreadable.append(f"{path}: {exc.strerror or exc}")
                continue
            self.entries.extend(entry for entry in found if entry.marker != "cert-authority")
        self.rejection: str | None = None
        self.pinned_line: int | None = None

    @property
    def trusted(self) -> list[KnownHostsEntry]:
        """Entries that vouch for a key of this host (malformed ones included: they block pins)."""
        return [entry for entry in self.entries if entry.marker is None]

    def server_host_key_algs(self) -> list[str]:
        """Signature algorithms to offer: types already known for this host first, then defaults."""
        algs: list[str] = []
        for entry in self.trusted:
            if entry.key_blob is None:
                continue
            try:
                key = decode_ssh_public_key(entry.key_blob)
            except (asyncssh.KeyImportError, ValueError):
                continue
            algs.extend(alg.decode("ascii") for alg in key.sig_algorithms)
        available = [alg.decode("ascii") for alg in get_default_public_key_algs()]
        algs.extend(alg for alg in _PREFERRED_HOST_KEY_ALGS if alg in available)
        algs.extend(available)
        return list(dict.fromkeys(algs))

    def check(self, key: asyncssh.SSHKey) -> bool:
        """Accept or refuse `key`; on refusal `rejection` holds the message for the operator."""
        blob = key.public_data
        offered = f"{key_type_name(key)} {key_fingerprint(key)}"
        who = f"{self.name} ({self.lookup_name})"
        if self.unreadable:
            self.rejection = f"cannot verify host key {offered} of {who}: cannot read " + "; ".join(
                self.unreadable
            )
            return False
        for entry in self.entries:
            if entry.marker == "revoked" and entry.key_blob == blob:
                self.rejection = f"host key {offered} of {who} is REVOKED at {entry.where}"
                return False
        trusted = self.trusted
        if any(entry.key_blob == blob for entry in trusted):
            return True
        if trusted:
            self.rejection = self._changed_message(who, offered, trusted)
            return False
        if not self.options.accept_new:
            self.rejection = (
                f"unknown host key for {who}: {offered}. Verify the fingerprint, then re-run "
                f"with {ACCEPT_NEW_HINT} to pin it (in {self.options.pinned_hosts_file}), "
                f"or add it to ~/.ssh/known_hosts"
            )
            return False
        try:
            conflict, line = pin_host_key(
                self.options.pinned_hosts_file, self.address, self.port, key,
                name=self.lookup_name,
            )
        except OSError as exc:
            self.rejection = (
                f"cannot pin host key {offered} of {who} in {self.options.pinned_hosts_file}: "
                f"{exc.strerror or exc}"
            )
            return False
        if conflict is not None:
            self.rejection = self._changed_message(who, offered, [conflict])
            return False
        self.pinned_line = line
        return True

    def _changed_message(self, who: str, offered: str, old: list[KnownHostsEntry]) -> str:
        same_type = [entry for entry in old if entry.key_type == offered.split()[0]]
        shown = same_type or old
        listed = "; ".join(_describe(entry) for entry in shown)
        first = shown[0]
        return (
            f"HOST KEY CHANGED for {who}: the host now offers {offered}, but {listed} "
            f"records a different key for it. This may be a man-in-the-middle attack, or the "
            f"host was reinstalled. fleet refuses it (even with {ACCEPT_NEW_HINT}). If the change "
            f"is expected, verify the new fingerprint, delete line {first.line} of {first.path}, "
            f"then re-run with {ACCEPT_NEW_HINT}"
        )


def _ensure_private_dir(directory: Path) -> None:
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)


def pin_host_key(
    path: Path, address: str, port: int, key: asyncssh.SSHKey, *, name: str | None = None
) -> tuple[KnownHostsEntry | None, int | None]:
    """Append `key` for (address, port) to the pinned file (0600, directory 0700), under a lock,
    as `name` (a HostKeyAlias) where given, else as `host_field(address, port)`.

    Returns (conflicting entry, None) when the file already holds another key for this host
    (another fleet process pinned first), else (None, line number of the entry).
    """
    _ensure_private_dir(path.parent)
    name = name or host_field(address, port)
    blob = key.public_data
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.fchmod(fd, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        entries = [
            entry
            for entry in read_known_hosts(path)
            if entry.marker is None and hosts_match(entry.hosts, name)
        ]
        for entry in entries:
            if entry.key_blob == blob:
                return None, entry.line
        if entries:
            return entries[0], None
        with open(path, "rb") as existing:
            content = existing.read()
        prefix = b"\n" if content and not content.endswith(b"\n") else b""
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        encoded = base64.b64encode(blob).decode("ascii")
        line = f"{name} {key_type_name(key)} {encoded} fleet-pinned-{stamp}\n"
        os.write(fd, prefix + line.encode("ascii"))
        os.fsync(fd)
        return None, content.count(b"\n") + (1 if prefix else 0) + 1
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class PolicyClient(asyncssh.SSHClient):
    """asyncssh client whose host-key check is a HostKeyPolicy."""

    def __init__(self, policy: HostKeyPolicy) -> None:
        super().__init__()
        self.policy = policy

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        return self.policy.check(key)


def no_known_hosts(_host: str, _addr: str, _port: int | None) -> tuple[list[str], ...]:
    """known_hosts callback trusting nothing, so asyncssh asks PolicyClient about every key.

    (known_hosts=None would disable the check altogether instead.)
    """
    return ([], [], [])
