"""Hostile input to every parser of outside data: only the documented error, never a crash.

Inventory files → ConfigError; probe lines → ProbeError; nvidia-smi output → ProbeError;
mDNS TXT records → never an exception, and every shown value a single printable line.
"""

from __future__ import annotations

import contextlib
import json
import string
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.discovery.txt import display_text, parse_properties, parse_txt, summarize
from fleet.errors import ConfigError, ProbeError
from fleet.inventory.loader import load_inventory
from fleet.probe.parse import parse_probe_line
from fleet.probe.smi import QUERY_FIELDS, new_marker, parse_smi_output
from fleet.reports import ProbeReport
from tests.unit.test_probe_parse import _gpu, _line
from tests.unit.test_probe_smi import output as smi_output
from tests.unit.test_probe_smi import row as smi_row

PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
ESCAPE = "\x1b"

# ---- values --------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.text(max_size=12), children, max_size=5),
    ),
    max_leaves=25,
)
hostile_text = st.lists(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=8)
    | st.sampled_from(["\x1b[2J", "\x1b]0;pwned\x07", "\x00", "\r", "\n", "\u202e", "\ufeff",
                       "\x9b31m"]),
    max_size=8,
).map("".join)


def assert_single_printable_line(text: str) -> None:
    assert ESCAPE not in text
    assert not any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in text), repr(text)


# ---- inventory -----------------------------------------------------------------------------

INVENTORY_KEYS = ["address", "port", "user", "identity_file", "python", "connection",
                  "labels", "groups", "ansible_host", "ansible_port", "hosts", "vars",
                  "children", "proxy_jump", "settings", "version"]


def _load_text(text: str | bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "inventory.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "replace"))
        try:
            load_inventory(path)
        except ConfigError as exc:
            assert str(path) in str(exc), f"error does not name the file: {exc}"


@PROPERTY_SETTINGS
@given(st.text(alphabet=string.printable + "ñ\x1b\t", max_size=300))
def test_inventory_from_random_text_raises_only_config_error(text: str) -> None:
    _load_text(text)


@PROPERTY_SETTINGS
@given(st.binary(max_size=300))
def test_inventory_from_random_bytes_raises_only_config_error(data: bytes) -> None:
    _load_text(data)


host_entries = st.dictionaries(
    st.sampled_from(INVENTORY_KEYS), json_values | hostile_text, max_size=6
)
inventories = st.one_of(
    st.fixed_dictionaries({"hosts": st.dictionaries(hostile_text, host_entries, max_size=4)}),
    st.fixed_dictionaries({
        "all": st.fixed_dictionaries({
            "hosts": st.dictionaries(hostile_text, host_entries | st.none(), max_size=4),
            "children": st.dictionaries(st.text(max_size=8), json_values, max_size=3),
            "vars": host_entries,
        })
    }),
    st.dictionaries(st.sampled_from(INVENTORY_KEYS) | st.text(max_size=8), json_values,
                    max_size=5),
    json_values,
)


@settings(PROPERTY_SETTINGS, max_examples=100)
@given(inventories)
def test_inventory_from_random_structures_raises_only_config_error(structure: Any) -> None:
    _load_text(yaml.safe_dump(structure, allow_unicode=True))


@PROPERTY_SETTINGS
@given(st.text(alphabet="{}[]:,-&*!|>'\"#%@ \nab1", max_size=120))
def test_inventory_from_yaml_punctuation_raises_only_config_error(text: str) -> None:
    _load_text(text)


# ---- probe lines ---------------------------------------------------------------------------


def _parse_line(line: bytes | str) -> ProbeReport | None:
    try:
        report = parse_probe_line(line, "hostile")
    except ProbeError as exc:
        assert exc.host == "hostile"
        return None
    for gpu in report.gpus:
        for name in (gpu.name, gpu.uuid, gpu.error):
            if name is not None:
                assert_single_printable_line(name)
    return report


@PROPERTY_SETTINGS
@given(st.binary(max_size=400))
def test_probe_line_from_random_bytes_raises_only_probe_error(data: bytes) -> None:
    _parse_line(data)


@PROPERTY_SETTINGS
@given(json_values)
def test_probe_line_from_random_json_raises_only_probe_error(value: Any) -> None:
    _parse_line(json.dumps(value))


GPU_FIELDS = list(_gpu(0))
HOST_FIELDS = list(_line()["host"])


@PROPERTY_SETTINGS
@given(
    gpu_changes=st.dictionaries(st.sampled_from(GPU_FIELDS), json_values | hostile_text,
                                max_size=6),
    host_changes=st.dictionaries(st.sampled_from(HOST_FIELDS), json_values | hostile_text,
                                 max_size=6),
    top_changes=st.dictionaries(st.sampled_from(["schema", "ts", "method", "gpus", "host",
                                                 "gpu_reason", "warnings"]),
                                json_values, max_size=2),
    cut=st.none() | st.integers(min_value=0, max_value=2000),
)
def test_probe_line_with_hostile_fields_raises_only_probe_error(
    gpu_changes: dict[str, Any], host_changes: dict[str, Any], top_changes: dict[str, Any],
    cut: int | None,
) -> None:
    gpu = _gpu(0)
    gpu.update(gpu_changes)
    line = _line(gpus=[gpu, _gpu(1)])
    line["host"].update(host_changes)
    line.update(top_changes)
    encoded = json.dumps(line).encode()
    _parse_line(encoded if cut is None else encoded[:cut])  # cut: a truncated line


# ---- nvidia-smi fallback output ------------------------------------------------------------

smi_cells = st.dictionaries(
    st.sampled_from([field.replace(".", "_") for field in QUERY_FIELDS]),
    hostile_text.filter(lambda text: "\n" not in text and "\r" not in text), max_size=6,
)


@PROPERTY_SETTINGS
@given(
    rows=st.lists(smi_cells, max_size=4),
    noise=st.lists(hostile_text, max_size=3),
    smi_exit=st.sampled_from([0, 0, 0, 9, 12, 15, 127, 255]),
)
def test_smi_output_with_hostile_rows_raises_only_probe_error(
    rows: list[dict[str, str]], noise: list[str], smi_exit: int,
) -> None:
    marker = new_marker()
    lines = [smi_row(**cells) for cells in rows] + noise
    try:
        report = parse_smi_output(smi_output(marker, "\n".join(lines), smi_exit), "h", marker)
    except ProbeError as exc:
        assert exc.host == "h"
        return
    for gpu in report.gpus:
        if gpu.name is not None:
            assert_single_printable_line(gpu.name)


@PROPERTY_SETTINGS
@given(st.binary(max_size=600))
def test_smi_output_from_random_bytes_raises_only_probe_error(data: bytes) -> None:
    marker = new_marker()
    with contextlib.suppress(ProbeError):  # the only allowed failure
        parse_smi_output(data, "h", marker)


# ---- mDNS TXT records ----------------------------------------------------------------------

SERVICE_TYPES = ["_fleet._tcp", "_gpu-sd._tcp", "_hwgpus._tcp", "_ssh._tcp", "_net-sd._tcp."]
TXT_KEYS = [b"v", b"gpus", b"gpu_model", b"ssh_port", b"mem_gb", b"session", b"hostname",
            b"GPU Count", b"GPU0 Type", b"gpu", b"nodeid", b""]


def _check_summary(service_type: str, record: Any) -> None:
    summary = summarize(service_type, record)
    for text in (summary.gpu_model, summary.session, summary.hostname, summary.node_id,
                 summary.version):
        if text is not None:
            assert_single_printable_line(text)
    json.dumps(summary.as_dict())


@PROPERTY_SETTINGS
@given(st.binary(max_size=700), st.sampled_from(SERVICE_TYPES))
def test_txt_wire_bytes_never_raise(raw: bytes, service_type: str) -> None:
    _check_summary(service_type, parse_txt(raw))


@PROPERTY_SETTINGS
@given(
    st.dictionaries(st.sampled_from(TXT_KEYS) | st.binary(max_size=40),
                    st.none() | st.binary(max_size=80) | hostile_text.map(str.encode),
                    max_size=12),
    st.sampled_from(SERVICE_TYPES),
)
def test_txt_properties_never_raise(properties: dict[bytes, bytes | None],
                                    service_type: str) -> None:
    _check_summary(service_type, parse_properties(properties))


@PROPERTY_SETTINGS
@given(hostile_text | st.binary(max_size=80))
def test_display_text_is_one_printable_line(value: str | bytes) -> None:
    assert_single_printable_line(display_text(value))
