"""Client keys (an inventory's identity files, those an ssh config names, the default
~/.ssh/id_*), loaded once per process.

Loading a private key is not cheap: an RSA-3072 key takes ~85 ms of CPU (OpenSSL 3 checks the
key as it loads it), and asyncssh loads the keys it is given as paths, or finds by default,
each time it prepares a connection. A fan-out to a hundred hosts would load the same key a
hundred times or more; here it is loaded once, and again only when its files change, and the
loaded pairs are handed to asyncssh (as asyncssh's own documentation advises for a key used
repeatedly).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import asyncssh
from asyncssh.public_key import load_default_keypairs

from fleet.errors import ConfigError
from fleet.ssh.file_memo import FileMemo
from fleet.ssh.hostkeys import key_fingerprint

# What asyncssh reads for one key path: the key, its certificate and its public half.
_COMPANIONS = ("", "-cert.pub", ".pub")

KeyPairs = Sequence[asyncssh.SSHKeyPair]
_loaded: FileMemo[KeyPairs] = FileMemo()  # by identity file path
_defaults: FileMemo[KeyPairs] = FileMemo()  # by ~/.ssh, from its id_* files
_configured: FileMemo[KeyPairs] = FileMemo()  # by (IdentityFile paths, IdentitiesOnly)


def _contents(path: str) -> tuple[bytes | None, ...]:
    found: list[bytes | None] = []
    for suffix in _COMPANIONS:
        try:
            found.append(Path(path + suffix).read_bytes())
        except (FileNotFoundError, NotADirectoryError):
            found.append(None)
    return tuple(found)


def _mismatched(paths: Iterable[str]) -> ConfigError | None:
    """The error naming the first of `paths` whose `.pub` file is not its public half (or is
    not a public key at all); None when each that can be read matches."""
    for path in paths:
        public_path = path + ".pub"
        if not os.path.isfile(public_path):
            continue
        try:
            private = asyncssh.read_private_key(path)
        except (OSError, asyncssh.KeyImportError, asyncssh.KeyEncryptionError, ValueError):
            continue  # encrypted (left to the agent) or unreadable: not what failed here
        try:
            public = asyncssh.read_public_key(public_path)
        except (OSError, asyncssh.KeyImportError, ValueError) as exc:
            return ConfigError(f"client key {path}: its public key file {public_path} cannot "
                               f"be read ({exc}); fix or delete {public_path}")
        if public.public_data != private.public_data:
            return ConfigError(
                f"client key pair mismatch: {public_path} ({key_fingerprint(public)}) is not "
                f"the public half of {path} ({key_fingerprint(private)}). Regenerate it with "
                f"`ssh-keygen -y -f {path} > {public_path}`, or delete it")
    return None


def _loaded_checked(paths: Callable[[], Iterable[str]], load: Callable[[], KeyPairs]) -> KeyPairs:
    """load(); a key pair that does not match (asyncssh: ValueError "Public key mismatch", no
    file named) becomes a ConfigError naming its files: it is the controller's configuration,
    not any host, that is wrong."""
    try:
        return load()
    except ValueError as exc:
        if isinstance(exc, (asyncssh.KeyImportError, asyncssh.KeyEncryptionError)):
            raise
        error = _mismatched(paths()) or ConfigError(
            f"cannot load client keys {', '.join(paths())}: {exc}")
        raise error from exc


def identity_keypairs(path: str) -> KeyPairs:
    """The key pairs asyncssh loads from identity file `path` (~ expanded; with its
    certificate, if any).

    Raises what asyncssh's load_keypairs raises (OSError, KeyImportError, KeyEncryptionError).
    The files are read on every call; the key is parsed again only when one of them changed.
    """
    path = os.path.expanduser(path)
    contents = _contents(path)
    if contents[0] is None:
        raise FileNotFoundError(2, "No such file or directory", path)
    return _loaded.get(path, contents, lambda: _loaded_checked(
        lambda: [path], lambda: asyncssh.load_keypairs([path])))


def config_keypairs(paths: Sequence[str], identities_only: bool) -> KeyPairs:
    """The key pairs asyncssh loads from the IdentityFile paths a host's ssh config names
    (tokens already expanded), with asyncssh's own call and arguments for them: encrypted keys
    are skipped (left to the agent), and with IdentitiesOnly a file holding only a public key
    (an agent key's) is skipped rather than refused. Files that do not exist are skipped, as
    OpenSSH skips them; FileNotFoundError when none does.

    The files are read on every call; the keys are loaded again only when one of them changed.
    """
    found = ((path, _contents(path)) for path in (os.path.expanduser(p) for p in paths))
    present = tuple((path, contents) for path, contents in found if contents[0] is not None)
    if not present:
        raise FileNotFoundError(2, "No such file or directory", ", ".join(paths))
    kept = tuple(path for path, _ in present)
    return _configured.get(
        (kept, identities_only), tuple(contents for _, contents in present),
        lambda: _loaded_checked(lambda: kept, lambda: asyncssh.load_keypairs(
            list(kept), None, (), identities_only, True)))


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:  # gone, a directory, or unreadable: asyncssh skips such a file too
        return None


def default_keypairs() -> KeyPairs:
    """The key pairs asyncssh loads when nothing names one: the user's ~/.ssh/id_* keys (with
    their certificates; passphrase-protected ones skipped, as asyncssh does, for the agent).

    The ~/.ssh/id_* files are read on every call; the keys are loaded again only when one of
    them changed (or HOME did).
    """
    directory = Path("~", ".ssh").expanduser()
    try:
        candidates = sorted(directory.glob("id_*"))
    except OSError:
        candidates = []
    contents = tuple((path.name, _read(path)) for path in candidates)
    private = [str(path) for path in candidates if not path.name.endswith(".pub")]
    return _defaults.get(str(directory), contents,
                         lambda: _loaded_checked(lambda: private, load_default_keypairs))
