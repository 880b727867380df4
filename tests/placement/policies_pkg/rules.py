"""Example lab policies: prefer a rack, and broken ones that must be reported clearly."""

from __future__ import annotations

from fleet.placement.candidates import GpuCandidate
from fleet.placement.scoring.policies import PlacementView


def prefer_rack_b(gpu: GpuCandidate, view: PlacementView) -> dict[str, float]:
    """Rack b first, then the coolest GPU."""
    host = view.host(gpu.host)
    rack = host.label("rack") if host is not None else None
    return {"rack_b": 10.0 if rack == "b" else 0.0,
            "cool": -(gpu.temperature_c or 0.0) / 100}


def plain_number(gpu: GpuCandidate, view: PlacementView) -> float:
    """The highest index wins."""
    return float(gpu.index)


def returns_text(gpu: GpuCandidate, view: PlacementView) -> str:
    return "high"


def returns_nan(gpu: GpuCandidate, view: PlacementView) -> float:
    return float("nan")


def raises(gpu: GpuCandidate, view: PlacementView) -> float:
    raise KeyError("rack")


NOT_CALLABLE = 3
