"""Ranking policies: least-loaded, pack, spread, and loading a user's `module:function` policy.

A policy is a callable `policy(gpu: GpuCandidate, view: PlacementView) -> float | Mapping[str,
float]` called once per eligible GPU; higher is better. A mapping names the factors of the score
(their sum is the score), which `--explain` shows one by one.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Union

from fleet.errors import ConfigError
from fleet.placement.candidates import GpuCandidate, HostCandidate
from fleet.placement.free import unmanaged_use
from fleet.placement.request import PlacementRequest

PolicyResult = Union[float, Mapping[str, float]]  # noqa: UP007 - a runtime alias, kept readable


class PolicyError(ConfigError):
    """A policy could not be loaded, or returned something that is not a score."""


@dataclass(frozen=True)
class PlacementView:
    """What a policy may look at besides the GPU it scores: the request and every candidate.

    `gpus` holds every candidate GPU (with `allocation` filled in), `eligible` the ones that
    passed every filter.
    """

    request: PlacementRequest
    now: float
    hosts: tuple[HostCandidate, ...]
    gpus: tuple[GpuCandidate, ...]
    eligible: tuple[GpuCandidate, ...]

    def host(self, name: str) -> HostCandidate | None:
        """The host named `name`, or None."""
        return next((host for host in self.hosts if host.name == name), None)

    def host_gpus(self, name: str) -> tuple[GpuCandidate, ...]:
        """Every candidate GPU of host `name`."""
        return tuple(gpu for gpu in self.gpus if gpu.host == name)

    def host_used_fraction(self, name: str) -> float:
        """Share of the host's GPUs that are allocated or busy with work outside fleet (0–1)."""
        gpus = self.host_gpus(name)
        if not gpus:
            return 0.0
        used = sum(1 for gpu in gpus if gpu.allocation is not None or unmanaged_use(gpu))
        return used / len(gpus)


Policy = Callable[[GpuCandidate, PlacementView], PolicyResult]


def _fraction(value: float | None, total: float | None, unknown: float = 0.5) -> float:
    """value/total clamped to 0..1; `unknown` when either is missing."""
    if value is None or not total:
        return unknown
    return min(1.0, max(0.0, value / total))


def _worst(*values: float | None) -> float | None:
    """The largest known value (a GPU busy now, or lately, counts as busy), or None."""
    known = [value for value in values if value is not None]
    return max(known) if known else None


def least_loaded(gpu: GpuCandidate, view: PlacementView) -> dict[str, float]:
    """Idle over the last minutes (mean and peak), free memory now and at peak, and cool.

    Each load figure is the worse of the recent history and the latest reading, so a GPU
    that was idle until a moment ago but is busy now does not look idle.
    """
    util_avg = _worst(gpu.recent_util_avg, gpu.utilization_pct)
    util_peak = _worst(gpu.recent_util_peak, gpu.utilization_pct)
    memory_peak = _worst(gpu.recent_memory_peak_bytes, gpu.memory_used_bytes)
    return {
        "idle": 1.0 * (1 - _fraction(util_avg, 100)),
        "calm": 0.5 * (1 - _fraction(util_peak, 100)),
        "free_mem": 1.0 * _fraction(gpu.memory_free_bytes, gpu.memory_total_bytes),
        "mem_headroom": 0.5 * (1 - _fraction(memory_peak, gpu.memory_total_bytes)),
        "cool": 0.25 * (1 - _fraction(gpu.temperature_c, 100)),
    }


def pack(gpu: GpuCandidate, view: PlacementView) -> dict[str, float]:
    """Fill partially used hosts first (keeps whole hosts free for big jobs); idle breaks ties."""
    util = _worst(gpu.recent_util_avg, gpu.utilization_pct)
    return {
        "host_used": 1.0 * view.host_used_fraction(gpu.host),
        "idle": 0.01 * (1 - _fraction(util, 100)),
    }


def spread(gpu: GpuCandidate, view: PlacementView) -> dict[str, float]:
    """Emptiest hosts first (spreads load and heat); idle breaks ties."""
    util = _worst(gpu.recent_util_avg, gpu.utilization_pct)
    return {
        "host_free": 1.0 * (1 - view.host_used_fraction(gpu.host)),
        "idle": 0.01 * (1 - _fraction(util, 100)),
    }


BUILTIN_POLICIES: dict[str, Policy] = {
    "least-loaded": least_loaded,
    "pack": pack,
    "spread": spread,
}


def resolve_policy(name: str) -> Policy:
    """A built-in policy by name, or a user's function named "package.module:function"."""
    cleaned = name.strip()
    if cleaned in BUILTIN_POLICIES:
        return BUILTIN_POLICIES[cleaned]
    module_name, sep, function_name = cleaned.partition(":")
    if not sep or not module_name or not function_name:
        known = ", ".join(BUILTIN_POLICIES)
        raise PolicyError(f"unknown policy {name!r}: use one of {known}, or module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PolicyError(f"policy {cleaned}: cannot import module {module_name}: {exc}") from exc
    function = getattr(module, function_name, None)
    if function is None or not callable(function):
        raise PolicyError(f"policy {cleaned}: module {module_name} has no function "
                          f"{function_name}")
    policy: Policy = function
    return policy


def score_gpu(policy: Policy, policy_name: str, gpu: GpuCandidate,
              view: PlacementView) -> dict[str, float]:
    """The policy's factors for one GPU, checked: finite numbers only (PolicyError otherwise)."""
    where = f"policy {policy_name} on GPU {gpu.host}:{gpu.index}"
    try:
        result = policy(gpu, view)
    except Exception as exc:
        raise PolicyError(f"{where} raised {type(exc).__name__}: {exc}") from exc
    if _is_number(result):
        factors = {"score": float(result)}  # type: ignore[arg-type]
    elif isinstance(result, Mapping):
        factors = {}
        for key, value in result.items():
            if not isinstance(key, str) or not _is_number(value):
                raise PolicyError(f"{where} returned factor {key!r}: {value!r}; "
                                  "factors must map names to numbers")
            factors[key] = float(value)
    else:
        raise PolicyError(f"{where} returned {type(result).__name__} {result!r}; expected a "
                          "number or a mapping of factor names to numbers")
    for key, value in factors.items():
        if not math.isfinite(value):
            raise PolicyError(f"{where} returned a non-finite value for {key}: {value}")
    return factors


def _is_number(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)
