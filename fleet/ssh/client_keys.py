"""An inventory's identity files, loaded once per process and again only when a file changes.

Loading a private key is not cheap: an RSA-3072 key takes ~90 ms of CPU (OpenSSL 3 checks the
key as it loads it), and asyncssh loads the keys it is given as paths each time it prepares a
connection. A fan-out to a hundred hosts that all name the same `identity_file` would load it
a hundred times or more; here it is loaded once and the loaded pairs are handed to asyncssh.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import asyncssh

# What asyncssh reads for one key path: the key, its certificate and its public half.
_COMPANIONS = ("", "-cert.pub", ".pub")

_loaded: dict[str, tuple[tuple[bytes | None, ...], Sequence[asyncssh.SSHKeyPair]]] = {}
_loaded_lock = threading.Lock()


def _contents(path: str) -> tuple[bytes | None, ...]:
    found: list[bytes | None] = []
    for suffix in _COMPANIONS:
        try:
            found.append(Path(path + suffix).read_bytes())
        except (FileNotFoundError, NotADirectoryError):
            found.append(None)
    return tuple(found)


def identity_keypairs(path: str) -> Sequence[asyncssh.SSHKeyPair]:
    """The key pairs asyncssh loads from identity file `path` (~ expanded; with its
    certificate, if any).

    Raises what asyncssh's load_keypairs raises (OSError, KeyImportError, KeyEncryptionError).
    The files are read on every call; the key is parsed again only when one of them changed.
    """
    path = os.path.expanduser(path)
    contents = _contents(path)
    if contents[0] is None:
        raise FileNotFoundError(2, "No such file or directory", path)
    # One load at a time: the hosts of a fan-out all ask at once, and all but the first wait
    # for its result instead of loading the same key beside it.
    with _loaded_lock:
        cached = _loaded.get(path)
        if cached is not None and cached[0] == contents:
            return cached[1]
        keypairs = asyncssh.load_keypairs([path])
        _loaded[path] = (contents, keypairs)
        return keypairs
