"""The probe's JSON line decoded straight into the report types, bounds checked, in one C pass."""

from __future__ import annotations

import itertools
import sys
from typing import Annotated

import msgspec

from fleet.model import PROBE_SCHEMA_VERSION
from fleet.probe.bounds import capped_warnings, sanitize_text
from fleet.probe.limits import (
    KNOWN_METHODS,
    MAX_GPUS,
    MAX_MESSAGE_CHARS,
    MAX_NAME_CHARS,
    MAX_WARNINGS,
)
from fleet.reports import GpuReport, HostReport, MessageText, NameText, ProbeReport, ProcessInfo

_Timestamp = Annotated[float, msgspec.Meta(ge=0, le=sys.float_info.max)]


class _Line(msgspec.Struct, forbid_unknown_fields=True):
    """The line around the reports (its `ts` is ProbeReport.timestamp). The reports' own
    bounds are in fleet.reports; a value outside them, an unknown field, or a null where the
    report has no None (`lost`, `processes`) makes the line take the lenient path."""

    schema: int
    ts: _Timestamp
    method: NameText | None = None
    host: HostReport = msgspec.field(default_factory=HostReport)
    gpus: Annotated[tuple[GpuReport, ...], msgspec.Meta(max_length=MAX_GPUS)] | None = None
    gpu_reason: MessageText | None = None
    warnings: (
        Annotated[tuple[MessageText, ...], msgspec.Meta(max_length=MAX_WARNINGS)] | None
    ) = None


_DECODER = msgspec.json.Decoder(_Line)
_QUOTE = ord('"')


def _text(value: str | None, limit: int = MAX_NAME_CHARS) -> str | None:
    return None if value is None else sanitize_text(value, limit)


def typed_report(line: bytes | str) -> ProbeReport | None:
    """The report of a line that fits the typed schema exactly, or None (take the lenient path)."""
    try:
        decoded = _DECODER.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    method = _text(decoded.method) or "nvml"
    if decoded.schema != PROBE_SCHEMA_VERSION or method not in KNOWN_METHODS:
        return None
    gpus = decoded.gpus or ()
    if _texts_are_clean(line) and _in_order(gpus):
        return ProbeReport(
            schema=PROBE_SCHEMA_VERSION, timestamp=decoded.ts, host=decoded.host, gpus=gpus,
            gpu_reason=decoded.gpu_reason, method=method, warnings=decoded.warnings or (),
        )
    return _cleaned(decoded, gpus, method)


def _in_order(gpus: tuple[GpuReport, ...]) -> bool:
    """Whether the GPUs come by ascending index, none twice (else _cleaned sorts or refuses)."""
    return all(earlier.index < later.index for earlier, later in itertools.pairwise(gpus))


def _texts_are_clean(line: bytes | str) -> bool:
    """Whether every text of the line is already what sanitize_text would make of it.

    The decoder bounds every text's length. Raw JSON without a backslash has no escapes, so its
    strings hold only the characters on the line; ASCII without DEL is printable there (JSON
    forbids raw control characters). A space is then the only white space a text can hold, and
    with no space next to a quote (compact JSON, as the probe writes it), none starts or ends
    with one.
    """
    return (isinstance(line, bytes) and line.isascii() and b"\\" not in line
            and b"\x7f" not in line and not _space_next_to_a_quote(line))


def _space_next_to_a_quote(line: bytes) -> bool:
    """Whether a space on the line touches a quote (a space is rare there and a quote common,
    so this visits the spaces: several times faster than searching for either pair)."""
    at = line.find(b" ")
    while at >= 0:
        if (at > 0 and line[at - 1] == _QUOTE) or line[at + 1:at + 2] == b'"':
            return True
        at = line.find(b" ", at + 1)
    return False


def _cleaned(decoded: _Line, gpus: tuple[GpuReport, ...], method: str) -> ProbeReport | None:
    """The report with each text through sanitize_text and the GPUs sorted; None (the lenient
    path, which says why) when two GPUs share an index."""
    if len({gpu.index for gpu in gpus}) != len(gpus):
        return None
    host = decoded.host
    return ProbeReport(
        schema=PROBE_SCHEMA_VERSION,
        timestamp=decoded.ts,
        host=msgspec.structs.replace(
            host, hostname=_text(host.hostname), kernel=_text(host.kernel),
            driver_version=_text(host.driver_version),
            cuda_driver_version=_text(host.cuda_driver_version),
            nvml_version=_text(host.nvml_version), python_version=_text(host.python_version),
        ),
        gpus=tuple(sorted((_cleaned_gpu(gpu) for gpu in gpus), key=lambda gpu: gpu.index)),
        gpu_reason=_text(decoded.gpu_reason, MAX_MESSAGE_CHARS),
        method=method,
        warnings=capped_warnings(
            [sanitize_text(item, MAX_MESSAGE_CHARS) for item in decoded.warnings or ()]
        ),
    )


def _cleaned_gpu(gpu: GpuReport) -> GpuReport:
    return msgspec.structs.replace(
        gpu, uuid=_text(gpu.uuid), name=_text(gpu.name), pci_bus_id=_text(gpu.pci_bus_id),
        error=_text(gpu.error, MAX_MESSAGE_CHARS),
        processes=tuple(_cleaned_process(process) for process in gpu.processes),
    )


def _cleaned_process(process: ProcessInfo) -> ProcessInfo:
    return msgspec.structs.replace(process, name=_text(process.name), user=_text(process.user))
