"""The TXT decoder and summaries against a table of hostile records (no network)."""

from __future__ import annotations

import pytest

from fleet.discovery.txt import (
    MAX_TXT_BYTES,
    MAX_TXT_ENTRIES,
    display_text,
    parse_properties,
    parse_txt,
    summarize,
)


def wire(*items: bytes) -> bytes:
    """TXT wire format: each item prefixed by its length."""
    return b"".join(bytes([len(item)]) + item for item in items)


# (case, service type, raw TXT, expected gpu_count, expected model, expected problem fragment)
HOSTILE = [
    ("plain", "_fleet._tcp", wire(b"v=1", b"gpus=4", b"gpu_model=A100"), 4, "A100", None),
    ("non-utf8 model", "_fleet._tcp", wire(b"gpus=2", b"gpu_model=\xff\xfeA\xc3"), 2,
     "\ufffd\ufffdA\ufffd", None),
    ("negative count", "_fleet._tcp", wire(b"gpus=-1"), None, None, "gpus='-1'"),
    ("absurd count", "_fleet._tcp", wire(b"gpus=99999999"), None, None, "outside 0..1024"),
    ("float count", "_fleet._tcp", wire(b"gpus=2.5"), None, None, "not a whole number"),
    ("hex count", "_fleet._tcp", wire(b"gpus=0x10"), None, None, "not a whole number"),
    ("duplicate key, first wins", "_fleet._tcp", wire(b"gpus=2", b"GPUS=8"), 2, None,
     "duplicate TXT key 'gpus'"),
    ("missing '=' is boolean", "_fleet._tcp", wire(b"gpus", b"gpu_model"), None, None, None),
    ("empty key", "_fleet._tcp", wire(b"=x", b"gpus=1"), 1, None, "empty key"),
    ("binary key", "_fleet._tcp", wire(b"\x1b[2J=1", b"gpus=1"), 1, None, "not short printable"),
    ("escape in value", "_fleet._tcp", wire(b"gpus=1", b"gpu_model=\x1b[31mRED\x07"), 1,
     "?[31mRED?", None),
    ("bidi override", "_fleet._tcp", wire(b"gpus=1", "gpu_model=A\u202eB".encode()), 1,
     "A?B", None),
    ("truncated string", "_fleet._tcp", wire(b"gpus=3") + b"\x40abc", 3, None,
     "ends inside a string"),
    ("hw-sd", "_gpu-sd._tcp", wire(b"GPU Count=2", b"GPU0 Type=H100", b"Session=lab-a"), 2,
     "H100", None),
    ("hw-sd absurd", "_gpu-sd._tcp", wire(b"GPU Count=-5"), None, None, "gpu count"),
    ("hwgpus count", "_hwgpus._tcp", wire(b"gpu=3"), 3, None, None),
    ("hwgpus models", "_hwgpus._tcp", wire(b"gpu=RTX 4090,RTX 4090"), 2, "RTX 4090", None),
    ("hwgpus absurd", "_hwgpus._tcp", wire(b"gpu=-2"), None, None, "gpu='-2'"),
    ("empty txt (avahi ssh)", "_ssh._tcp", b"\x00", None, None, None),
]


@pytest.mark.parametrize(("service_type", "raw", "count", "model", "problem"),
                         [case[1:] for case in HOSTILE], ids=[case[0] for case in HOSTILE])
def test_hostile_txt_table(service_type: str, raw: bytes, count: int | None,
                           model: str | None, problem: str | None) -> None:
    summary = summarize(service_type, parse_txt(raw))
    assert summary.gpu_count == count
    assert summary.gpu_model == model
    if problem is None:
        assert summary.problems == ()
    else:
        assert any(problem in text for text in summary.problems), summary.problems
    for text in (summary.gpu_model, summary.session, *summary.problems):
        assert text is None or ("\x1b" not in text and "\x07" not in text)


def test_oversized_record_and_too_many_entries_are_capped() -> None:
    many = wire(*(f"k{i}=v".encode() for i in range(200)))
    record = parse_txt(many)
    assert len(record.entries) == MAX_TXT_ENTRIES
    assert any("only the first" in problem for problem in record.problems)
    huge = wire(*([b"x=" + b"y" * 250] * 40))
    assert len(huge) > MAX_TXT_BYTES
    capped = parse_txt(huge)
    assert any("cut to" in problem for problem in capped.problems)
    assert capped.text("x") is not None and len(capped.text("x") or "") <= 64


def test_keys_are_case_insensitive_and_values_stay_bytes() -> None:
    record = parse_txt(wire(b"Session=Lab-A", b"SSH_PORT=2222", b"flag", b"empty="))
    assert record.entries == {"session": b"Lab-A", "ssh_port": b"2222", "flag": None,
                              "empty": b""}
    summary = summarize("_fleet._tcp", record)
    assert (summary.session, summary.ssh_port) == ("Lab-A", 2222)


def test_port_and_memory_ranges() -> None:
    bad = summarize("_fleet._tcp", parse_txt(wire(b"ssh_port=70000", b"mem_gb=1e9")))
    assert bad.ssh_port is None and bad.mem_gb is None and len(bad.problems) == 2
    good = summarize("_fleet._tcp", parse_txt(wire(b"ssh_port=22", b"mem_gb=320")))
    assert (good.ssh_port, good.mem_gb) == (22, 320.0)


def test_parse_properties_matches_wire_decoding() -> None:
    from_props = parse_properties({b"gpus": b"4", b"flag": None})
    assert from_props.entries == {"gpus": b"4", "flag": None}


def test_display_text_neutralises_terminal_escapes() -> None:
    assert display_text(b"a\x1b]0;title\x07b\x9bc\xe2\x80\x8bd") == "a?]0;title?b\ufffdc?d"
    assert display_text("x\x9by\u2028z") == "x?y?z"
    assert len(display_text("x" * 500, limit=10)) == 10
