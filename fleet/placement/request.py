"""What a placement asks for: GPU count, limits, host constraints, policy; memory-size parsing."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from fleet.errors import ConfigError
from fleet.probe.limits import MAX_GPUS, MAX_INT
from fleet.timeparse import MAX_DURATION_S

DEFAULT_POLICY = "least-loaded"
# The most hosts one gang spans (as `--nodes` takes), and the longest name or pattern taken.
MAX_NODES = 4096
MAX_TEXT = 4096
# The most labels one request names, and hosts it excludes (a fleet is far smaller).
MAX_LABELS = 256
MAX_EXCLUDED = 65536
# The oldest sample age a request may accept: a century, like every duration fleet takes.
MAX_SAMPLE_AGE_S = MAX_DURATION_S
# A sample older than this is not trusted for placement; the candidates' hosts are probed again.
DEFAULT_MAX_SAMPLE_AGE_S = 30.0

_MEMORY_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_MEMORY_PATTERN = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
_PERCENT_PATTERN = re.compile(r"(\d+(?:\.\d+)?)\s*%")


@dataclass(frozen=True)
class MemorySize:
    """An amount of GPU memory: absolute bytes, or a fraction of each GPU's total memory."""

    bytes: int | None = None
    fraction: float | None = None

    def __post_init__(self) -> None:
        if self.bytes is not None and not (_is_int(self.bytes) and 0 <= self.bytes <= MAX_INT):
            raise ConfigError(f"min_free_memory bytes must be a whole number from 0 to "
                              f"{MAX_INT}, not {_shown(self.bytes)}")
        if self.fraction is not None and not (_is_real(self.fraction)
                                              and 0 < self.fraction <= 1):
            raise ConfigError(f"min_free_memory fraction must be a number above 0 and at most "
                              f"1, not {_shown(self.fraction)}")

    def required_bytes(self, total_bytes: int | None) -> int | None:
        """Bytes needed on a GPU of `total_bytes` memory (None: a fraction of an unknown total)."""
        if self.bytes is not None:
            return self.bytes
        if self.fraction is None or total_bytes is None:
            return None
        return math.ceil(self.fraction * total_bytes)

    def __str__(self) -> str:
        if self.fraction is not None:
            return f"{self.fraction * 100:g}%"
        return format_memory(self.bytes or 0)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    """An int or float (never a bool), finite."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _shown(value: object) -> str:
    """A rejected value for a message, cut short (it may be anything a client sent)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _check_text(value: object, what: str, *, optional: bool = True) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ConfigError(f"{what} must be text of at most {MAX_TEXT} characters, "
                          f"not {_shown(value)}")


def parse_memory_size(text: str, *, what: str = "--min-free-mem") -> MemorySize:
    """Parse "20G", "512M", "1.5T", "20GiB", "1073741824" (bytes) or "80%" (of each GPU).

    Units are binary: K=KiB, M=MiB, G=GiB, T=TiB. Raises ConfigError naming `what`.
    """
    cleaned = text.strip()
    percent = _PERCENT_PATTERN.fullmatch(cleaned)
    if percent is not None:
        value = float(percent.group(1))
        if not 0 < value <= 100:
            raise ConfigError(f"{what} {text!r}: a percentage must be above 0 and at most 100")
        return MemorySize(fraction=value / 100)
    match = _MEMORY_PATTERN.fullmatch(cleaned)
    if match is None:
        raise ConfigError(
            f"invalid {what} {text!r}: use bytes or a size like 512M, 20G, 1.5T, or 80%"
        )
    number = float(match.group(1))
    unit = _MEMORY_UNITS[match.group(2).lower()]
    return MemorySize(bytes=int(number * unit))


def format_memory(value: int | None) -> str:
    """Bytes as a short binary size: "20.0G", "512.0M"; "?" for None."""
    if value is None:
        return "?"
    for suffix, unit in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if abs(value) >= unit:
            return f"{value / unit:.1f}{suffix}"
    return f"{value}B"


def parse_label(text: str) -> tuple[str, str]:
    """"key=value" as a pair; ConfigError when there is no key or no '='."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"invalid --label {text!r}: use KEY=VALUE (VALUE may be a glob)")
    return key.strip(), value.strip()


@dataclass(frozen=True)
class PlacementRequest:
    """Constraints and preferences for placing `gpus` GPUs on each of `nodes` hosts.

    hosts: a host pattern (`gpu*,@group,label:k=v,!name`); group: a group name glob;
    labels: (key, value-glob) pairs every chosen host must carry; gpu_model: a glob on the
    GPU's model name (case-insensitive); allow_unmanaged: GPUs in use by processes fleet did
    not start count as free; policy: a built-in name or "module:function"; exclude_hosts:
    host names never chosen (e.g. hosts that just failed); nodes: how many hosts (a gang,
    `gpus` on each); same: a label every node shares one value of (one rack, one switch).
    """

    gpus: int = 1
    min_free_memory: MemorySize | None = None
    max_util: float | None = None
    max_temp: float | None = None
    hosts: str | None = None
    group: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    gpu_model: str | None = None
    allow_unmanaged: bool = False
    policy: str = DEFAULT_POLICY
    exclude_hosts: frozenset[str] = field(default_factory=frozenset)
    max_sample_age_s: float = DEFAULT_MAX_SAMPLE_AGE_S
    nodes: int = 1
    same: str | None = None

    def __post_init__(self) -> None:
        """Every field's type and range (a request may come from JSON: trust no type)."""
        if not (_is_int(self.gpus) and 1 <= self.gpus <= MAX_GPUS):
            raise ConfigError(f"--gpus must be a whole number from 1 to {MAX_GPUS}, "
                              f"not {_shown(self.gpus)}")
        if not (_is_int(self.nodes) and 1 <= self.nodes <= MAX_NODES):
            raise ConfigError(f"--nodes must be a whole number from 1 to {MAX_NODES}, "
                              f"not {_shown(self.nodes)}")
        if not (self.min_free_memory is None or isinstance(self.min_free_memory, MemorySize)):
            raise ConfigError(f"min_free_memory must be a MemorySize, "
                              f"not {_shown(self.min_free_memory)}")
        for name in ("hosts", "group", "gpu_model", "same"):
            _check_text(getattr(self, name), f"--{name.replace('_', '-')}")
        _check_text(self.policy, "--policy", optional=False)
        if self.same is not None and not self.same.strip():
            raise ConfigError("--same must name a label")
        if len(self.labels) > MAX_LABELS or len(self.exclude_hosts) > MAX_EXCLUDED:
            raise ConfigError(f"at most {MAX_LABELS} labels and {MAX_EXCLUDED} excluded hosts")
        if not all(isinstance(pair, tuple) and len(pair) == 2 for pair in self.labels):
            raise ConfigError(f"--label must be (key, value) pairs, not {_shown(self.labels)}")
        for key, value in self.labels:
            _check_text(key, "--label key", optional=False)
            _check_text(value, "--label value", optional=False)
        if not isinstance(self.allow_unmanaged, bool):
            raise ConfigError(f"allow_unmanaged must be true or false, "
                              f"not {_shown(self.allow_unmanaged)}")
        for name in self.exclude_hosts:
            _check_text(name, "an excluded host", optional=False)
        if self.max_util is not None and not (_is_real(self.max_util)
                                              and 0 <= self.max_util <= 100):
            raise ConfigError(f"--max-util must be between 0 and 100, not {_shown(self.max_util)}")
        if self.max_temp is not None and not (_is_real(self.max_temp)
                                              and -50 <= self.max_temp <= 200):
            raise ConfigError(f"--max-temp must be between -50 and 200 °C, "
                              f"not {_shown(self.max_temp)}")
        if not (_is_real(self.max_sample_age_s)
                and 0 < self.max_sample_age_s <= MAX_SAMPLE_AGE_S):
            raise ConfigError(f"sample age limit must be a positive number of seconds up to "
                              f"{MAX_SAMPLE_AGE_S:g}, not {_shown(self.max_sample_age_s)}")
        if not self.policy.strip():
            raise ConfigError("--policy must name a policy")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (stored with queued tasks); from_dict reverses it."""
        memory = self.min_free_memory
        return {
            "gpus": self.gpus,
            "min_free_memory": None if memory is None else {
                "bytes": memory.bytes, "fraction": memory.fraction},
            "max_util": self.max_util,
            "max_temp": self.max_temp,
            "hosts": self.hosts,
            "group": self.group,
            "labels": [list(pair) for pair in self.labels],
            "gpu_model": self.gpu_model,
            "allow_unmanaged": self.allow_unmanaged,
            "policy": self.policy,
            "exclude_hosts": sorted(self.exclude_hosts),
            "max_sample_age_s": self.max_sample_age_s,
            "nodes": self.nodes,
            "same": self.same,
        }

    @property
    def total_gpus(self) -> int:
        """GPUs over all nodes."""
        return self.gpus * self.nodes

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlacementRequest:
        """The request that `to_dict` produced; ConfigError for a malformed mapping.

        Values are taken as they are, never converted (`"2"` is not 2, `"no"` is not false):
        `__post_init__` refuses a wrong type.
        """
        if not isinstance(data, dict):
            raise ConfigError(f"malformed placement request: not a mapping: {_shown(data)}")
        memory = data.get("min_free_memory")
        if memory is not None and not isinstance(memory, dict):
            raise ConfigError(f"malformed placement request: min_free_memory is not a mapping: "
                              f"{_shown(memory)}")
        labels, excluded = data.get("labels", ()), data.get("exclude_hosts", ())
        if not isinstance(labels, list | tuple) or not all(
                isinstance(pair, list | tuple) and len(pair) == 2 for pair in labels):
            raise ConfigError(f"malformed placement request: labels are not [key, value] "
                              f"pairs: {_shown(labels)}")
        if not isinstance(excluded, list | tuple) or not all(
                isinstance(name, str) for name in excluded):
            raise ConfigError(f"malformed placement request: exclude_hosts is not a list of "
                              f"names: {_shown(excluded)}")
        try:
            return cls(
                gpus=data.get("gpus", 1),
                min_free_memory=None if memory is None else MemorySize(
                    bytes=memory.get("bytes"), fraction=memory.get("fraction")),
                max_util=data.get("max_util"),
                max_temp=data.get("max_temp"),
                hosts=data.get("hosts"),
                group=data.get("group"),
                labels=tuple((key, value) for key, value in labels),
                gpu_model=data.get("gpu_model"),
                allow_unmanaged=data.get("allow_unmanaged", False),
                policy=data.get("policy", DEFAULT_POLICY),
                exclude_hosts=frozenset(excluded),
                max_sample_age_s=data.get("max_sample_age_s", DEFAULT_MAX_SAMPLE_AGE_S),
                nodes=data.get("nodes", 1),
                same=data.get("same"),
            )
        except ConfigError as exc:
            raise ConfigError(f"malformed placement request: {exc}") from exc
