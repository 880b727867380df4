"""The typed (msgspec) probe-line parser gives exactly the lenient parser's report or error."""

from __future__ import annotations

import json
import sys
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fleet.errors import ProbeError
from fleet.probe.limits import MAX_INT
from fleet.probe.parse import parse_probe_line, parse_probe_line_lenient
from fleet.probe.typed import _texts_are_clean, typed_report
from fleet.reports import ProbeReport
from tests.property.test_parsers import PROPERTY_SETTINGS, hostile_text, json_values
from tests.unit.test_probe_parse import _gpu, _line

# Values near every bound either parser checks, plus arbitrary JSON and hostile text.
edge_values = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(
        [
            0,
            1,
            -1,
            MAX_INT,
            MAX_INT + 1,
            1023,
            1024,
            2**64,
            1e18,
            -1e18,
            9.99e17,
            -9.99e17,
            0.0,
            -0.0,
            1.0,
            2.5,
            1e308,
            sys.float_info.max,
        ]
    ),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    hostile_text,
    json_values,
)
GPU_FIELDS = [*_gpu(0), "unexpected"]
HOST_FIELDS = [*_line()["host"], "unexpected"]
TOP_FIELDS = ["schema", "ts", "method", "gpus", "host", "gpu_reason", "warnings", "unexpected"]


def _outcome(parse: Any, line: bytes) -> ProbeReport | str:
    try:
        report: ProbeReport = parse(line, "h")
    except ProbeError as exc:
        return f"ProbeError: {exc}"
    return report


@PROPERTY_SETTINGS
@given(
    gpu_changes=st.dictionaries(st.sampled_from(GPU_FIELDS), edge_values, max_size=4),
    process_changes=st.dictionaries(
        st.sampled_from(["pid", "used_memory_bytes", "name", "x"]), edge_values, max_size=2
    ),
    host_changes=st.dictionaries(st.sampled_from(HOST_FIELDS), edge_values, max_size=4),
    top_changes=st.dictionaries(st.sampled_from(TOP_FIELDS), edge_values, max_size=2),
    drop=st.sets(
        st.sampled_from(["host", "gpus", "warnings", "method", "ts", "schema"]), max_size=1
    ),
    warnings=st.lists(hostile_text, max_size=3),
)
def test_typed_and_lenient_parsers_agree(
    gpu_changes: dict[str, Any],
    process_changes: dict[str, Any],
    host_changes: dict[str, Any],
    top_changes: dict[str, Any],
    drop: set[str],
    warnings: list[str],
) -> None:
    gpu = _gpu(0)
    gpu["processes"][0].update(process_changes)
    gpu.update(gpu_changes)
    line = _line(gpus=[gpu, _gpu(1)], warnings=warnings)
    line["host"].update(host_changes)
    line.update(top_changes)
    for name in drop:
        line.pop(name, None)
    try:
        spaced = json.dumps(line, allow_nan=True).encode()
        compact = json.dumps(line, allow_nan=True, separators=(",", ":")).encode()
        raw = json.dumps(line, allow_nan=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError):
        return  # not encodable at all: nothing to compare
    # The probe's own (compact) form is the one the C conversion takes when texts are clean.
    for encoded in (spaced, compact, raw.encode("utf-8", "surrogatepass")):
        assert _outcome(parse_probe_line, encoded) == _outcome(parse_probe_line_lenient, encoded)


def test_a_probe_line_takes_the_typed_path_and_a_surprise_does_not() -> None:
    line = _line(gpus=[_gpu(index) for index in range(8)], warnings=["gpu 3: fan: \x1b[2Jodd"])
    encoded = json.dumps(line, separators=(",", ":")).encode()
    assert typed_report(encoded) is not None
    assert not _texts_are_clean(encoded)  # the escape: sanitized
    assert typed_report(encoded) == parse_probe_line_lenient(encoded, "h")
    assert typed_report(encoded + b"\n") is not None
    line["gpus"][2]["temperature_c"] = "hot"  # the lenient path nulls it with a warning
    odd = json.dumps(line).encode()
    assert typed_report(odd) is None
    report = parse_probe_line(odd, "h")
    assert report.gpus[2].temperature_c is None
    assert report.warnings[-1] == "gpus[2].temperature_c: expected finite number, got str; ignored"


def test_a_clean_probe_line_is_decoded_in_c_with_the_same_report() -> None:
    line = _line(gpus=[_gpu(index) for index in range(8)], warnings=["gpu 3: fan: no reading"])
    encoded = json.dumps(line, separators=(",", ":")).encode()
    assert _texts_are_clean(encoded)
    assert typed_report(encoded) == parse_probe_line_lenient(encoded, "h")
    for unclean in (" padded ", "caf\u00e9", "bell\u0007", "del\u007f"):
        line["gpus"][1]["name"] = unclean
        odd = json.dumps(line, separators=(",", ":")).encode()
        assert not _texts_are_clean(odd), unclean
        assert typed_report(odd) == parse_probe_line_lenient(odd, "h")
    for too_long in ({"name": "x" * 300}, {"error": "e" * 1001}):  # cut by the lenient path
        odd = json.dumps({**line, "gpus": [{**line["gpus"][0], **too_long}]},
                         separators=(",", ":")).encode()
        assert typed_report(odd) is None
        assert parse_probe_line(odd, "h") == parse_probe_line_lenient(odd, "h")
    spaced = json.dumps(line).encode()  # white space between tokens: each text checked
    assert not _texts_are_clean(spaced)
    assert typed_report(spaced) == parse_probe_line_lenient(spaced, "h")
    line["gpus"][1]["name"] = "NVIDIA A100"
    for where, unclean in (("warnings", [" first text"]), ("gpu_reason", "last text ")):
        odd = json.dumps({**line, where: unclean}, separators=(",", ":")).encode()
        assert not _texts_are_clean(odd), unclean
        assert typed_report(odd) == parse_probe_line_lenient(odd, "h")
    line["gpus"][1]["lost"] = None  # the report's own type refuses it: the lenient path
    nulled = json.dumps(line, separators=(",", ":")).encode()
    assert typed_report(nulled) is None
    assert parse_probe_line(nulled, "h").gpus[1].lost is False
    line["gpus"][1]["lost"] = False
    line["gpus"].reverse()  # out of order: sorted by the typed path, as the lenient path does
    reordered = json.dumps(line, separators=(",", ":")).encode()
    assert typed_report(reordered) == parse_probe_line_lenient(reordered, "h")
    line["gpus"][0]["index"] = line["gpus"][1]["index"]  # twice: the lenient path refuses it
    repeated = json.dumps(line, separators=(",", ":")).encode()
    assert typed_report(repeated) is None
