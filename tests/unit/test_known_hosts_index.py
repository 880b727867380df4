"""The known_hosts index finds exactly the entries a line-by-line match finds, and sees edits."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.ssh.known_hosts import hosts_match, matching_entries, read_known_hosts


def _ed25519_line(fill: int) -> str:
    """A well-formed `ssh-ed25519 BASE64` key field (any 32 bytes make a valid blob here)."""
    blob = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + bytes([fill]) * 32
    return f"ssh-ed25519 {base64.b64encode(blob).decode()}"


KEY = _ed25519_line(1)
OTHER_KEY = _ed25519_line(2)
NAMES = ["gpu1", "GPU2", "gpu9", "10.0.0.5", "[10.0.0.5]:2222", "[10.0.0.7]:22", "h\u212a"]


def _hashed(name: str, salt: bytes) -> str:
    digest = hmac.new(salt, name.lower().encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


_part = st.sampled_from(
    ["gpu1", "gpu2", "GPU9", "gpu*", "!gpu9", "gpu?", "10.0.0.5", "[10.0.0.5]:2222",
     "[10.0.0.*]:22", "!", "", "hk", "H\u212a", "*"]
)
_field = st.one_of(
    st.lists(_part, min_size=1, max_size=4).map(",".join),
    st.builds(_hashed, st.sampled_from(NAMES), st.binary(min_size=4, max_size=8)),
    st.just("|1|not-base64|x"),
)
_line = st.one_of(
    st.builds(lambda hosts: f"{hosts} {KEY}", _field),
    st.builds(lambda hosts: f"@revoked {hosts} {OTHER_KEY}", _field),
    st.builds(lambda hosts: f"@cert-authority {hosts} {KEY}", _field),
    st.builds(lambda hosts: f"{hosts} ssh-ed25519", _field),  # malformed: no key
    st.just("# a comment"),
    st.just(""),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(_line, max_size=12))
def test_index_finds_what_a_line_by_line_match_finds(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "known_hosts"
    path.write_text("\n".join(lines) + "\n")
    entries = read_known_hosts(path)
    for name in NAMES:
        expected = [entry for entry in entries if hosts_match(entry.hosts, name)]
        assert matching_entries(path, name) == expected, name


def test_an_edit_is_seen_at_once_even_at_the_same_size_and_timestamp(tmp_path: Path) -> None:
    import os

    path = tmp_path / "known_hosts"
    path.write_text(f"[10.0.0.5]:2222 {KEY}\n")
    stamp = path.stat().st_mtime_ns
    (first,) = matching_entries(path, "[10.0.0.5]:2222")
    path.write_text(f"[10.0.0.5]:2222 {OTHER_KEY}\n")  # same length, another key
    os.utime(path, ns=(stamp, stamp))
    (second,) = matching_entries(path, "[10.0.0.5]:2222")
    assert first.key_blob != second.key_blob
    assert second.key_blob == base64.b64decode(OTHER_KEY.split()[1])
    path.unlink()
    assert matching_entries(path, "[10.0.0.5]:2222") == []


def test_plain_names_match_without_regard_to_case_and_patterns_are_tried(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(f"GPU1,gpu2 {KEY}\ngpu*,!gpu9 {KEY}\n{_hashed('gpu9', b'salt')} {KEY}\n")
    assert [entry.line for entry in matching_entries(path, "gpu1")] == [1, 2]
    assert [entry.line for entry in matching_entries(path, "gpu9")] == [3]
    assert matching_entries(path, "other") == []
