"""`--explain` output: each candidate's score per factor and every exclusion, as text or JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleet.placement.request import format_memory
from fleet.render.table import Column, render_table

if TYPE_CHECKING:
    from fleet.placement.candidates import GpuCandidate
    from fleet.placement.place import PlacementResult
    from fleet.wire.dispatch import PlaceReport


def factor_names(result: PlacementResult) -> list[str]:
    """Every factor any scored GPU has, in first-seen order."""
    names: list[str] = []
    for item in result.scored:
        names.extend(name for name in item.factors if name not in names)
    return names


def render_explain(result: PlacementResult) -> str:
    """A headline, the eligible GPUs best first (with factors), then every exclusion."""
    lines = [f"{result.summary()}; data from {result.source}"]
    names = factor_names(result)
    if result.scored:
        columns = [Column(""), Column("HOST"), Column("GPU", ">"), Column("MODEL", max_width=24),
                   Column("FREE", ">"), Column("UTIL", ">"), Column("SCORE", ">")]
        columns.extend(Column(name, ">") for name in names)
        rows = [
            ["*" if item.chosen else "", item.gpu.host, item.gpu.index, item.gpu.model,
             format_memory(item.gpu.memory_free_bytes), _util(item.gpu), f"{item.score:.3f}",
             *(f"{item.factors[name]:.3f}" if name in item.factors else None for name in names)]
            for item in result.scored
        ]
        lines += ["", "Eligible GPUs, best first (* = chosen):", render_table(columns, rows)]
    if result.exclusions:
        rows = [
            [exclusion.host, "-" if exclusion.index is None else exclusion.index,
             "; ".join(exclusion.reasons)]
            for exclusion in sorted(result.exclusions, key=lambda e: (e.host, e.index or -1))
        ]
        columns = [Column("HOST"), Column("GPU", ">"), Column("WHY NOT", max_width=120)]
        lines += ["", "Excluded:", render_table(columns, rows)]
    return "\n".join(lines)


def explain_to_json(result: PlacementResult) -> dict[str, Any]:
    """The placement as plain data: choice, scored candidates, exclusions."""
    return {
        "placed": result.placed,
        "host": result.host,
        "gpus": [_gpu_json(gpu) for gpu in result.gpus],
        "nodes": [{"rank": rank, "host": node.host, "gpus": [_gpu_json(gpu) for gpu in node.gpus]}
                  for rank, node in enumerate(result.nodes)],
        "policy": result.request.policy,
        "request": result.request.to_dict(),
        "source": result.source,
        "placed_at": result.placed_at,
        "candidates": [
            {**_gpu_json(item.gpu), "score": item.score, "factors": item.factors,
             "chosen": item.chosen}
            for item in result.scored
        ],
        "exclusions": [
            {"host": exclusion.host, "index": exclusion.index, "reasons": list(exclusion.reasons)}
            for exclusion in result.exclusions
        ],
    }


def _gpu_json(gpu: GpuCandidate) -> dict[str, Any]:
    return {
        "host": gpu.host,
        "index": gpu.index,
        "uuid": gpu.uuid,
        "model": gpu.model,
        "memory_total_bytes": gpu.memory_total_bytes,
        "memory_free_bytes": gpu.memory_free_bytes,
        "utilization_pct": gpu.utilization_pct,
        "temperature_c": gpu.temperature_c,
        "recent_util_avg": gpu.recent_util_avg,
        "recent_memory_peak_bytes": gpu.recent_memory_peak_bytes,
    }


def _util(gpu: GpuCandidate) -> str | None:
    if gpu.utilization_pct is None:
        return None
    return f"{gpu.utilization_pct:.0f}%"


def place_report(result: PlacementResult) -> PlaceReport:
    """The placement as `fleet dispatch --dry-run` shows it, in both modes (and on the wire)."""
    from fleet.wire.dispatch import PlaceReport

    return PlaceReport(result.host, result.summary(), render_explain(result),
                       explain_to_json(result))
