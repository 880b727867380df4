"""Compact builders of placement candidates for table-driven tests."""

from __future__ import annotations

from typing import Any

from fleet.placement.candidates import CandidateSet, GpuCandidate, HostCandidate

NOW = 1_000_000.0
GIB = 1 << 30


def host(name: str, **fields: Any) -> HostCandidate:
    """An up, undrained host checked just now."""
    values: dict[str, Any] = {"state": "up", "checked_at": NOW - 1, "last_seen": NOW - 1}
    values.update(fields)
    return HostCandidate(name=name, **values)


def gpu(host_name: str, index: int, **fields: Any) -> GpuCandidate:
    """An idle, healthy 80 GiB GPU sampled a second ago."""
    values: dict[str, Any] = {
        "uuid": f"GPU-{host_name}-{index}", "model": "NVIDIA H100 80GB HBM3",
        "memory_total_bytes": 80 * GIB, "memory_used_bytes": 0, "utilization_pct": 0.0,
        "temperature_c": 35.0, "process_count": 0, "sampled_at": NOW - 1,
    }
    values.update(fields)
    return GpuCandidate(host=host_name, index=index, **values)


def fleet(*hosts: HostCandidate, gpus: list[GpuCandidate]) -> CandidateSet:
    """A candidate set from the database."""
    return CandidateSet(hosts=hosts, gpus=tuple(gpus), source="database", taken_at=NOW)


def two_idle_hosts(count: int = 2) -> CandidateSet:
    """Hosts "a" and "b", each with `count` idle GPUs."""
    return fleet(host("a"), host("b"),
                 gpus=[gpu(name, i) for name in ("a", "b") for i in range(count)])
