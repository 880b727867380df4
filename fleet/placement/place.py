"""Pure placement: filter the candidates, score the eligible GPUs, pick N GPUs on one host."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, replace

from fleet.placement.candidates import CandidateSet, GpuCandidate
from fleet.placement.filters import gpu_exclusions, host_exclusions
from fleet.placement.request import PlacementRequest
from fleet.placement.scoring.policies import PlacementView, resolve_policy, score_gpu
from fleet.snapshot import AllocationInfo

# With a random tie-breaker, scores this close to the best count as equally good.
TIE_TOLERANCE = 0.05


@dataclass(frozen=True)
class Exclusion:
    """A host (index None) or GPU that was left out, and every reason why."""

    host: str
    index: int | None
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class ScoredGpu:
    """An eligible GPU with its score per factor (the score is their sum) and whether chosen."""

    gpu: GpuCandidate
    factors: dict[str, float]
    chosen: bool = False

    @property
    def score(self) -> float:
        """The sum of the factors."""
        return sum(self.factors.values())


@dataclass(frozen=True)
class PlacementResult:
    """Where the request fits (host and GPU indices), or that it fits nowhere, and why."""

    request: PlacementRequest
    host: str | None
    gpus: tuple[GpuCandidate, ...]
    scored: tuple[ScoredGpu, ...]
    exclusions: tuple[Exclusion, ...]
    source: str
    placed_at: float

    @property
    def placed(self) -> bool:
        """True when a host with enough GPUs was found."""
        return self.host is not None

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """Indices (on the chosen host) of the chosen GPUs, ascending."""
        return tuple(gpu.index for gpu in self.gpus)

    def summary(self) -> str:
        """One line: where it was placed, or why nothing fits."""
        if self.host is not None:
            indices = ",".join(str(index) for index in self.gpu_indices)
            return f"placed on {self.host} GPU {indices} (policy {self.request.policy})"
        gpus = "GPU" if self.request.gpus == 1 else "GPUs"
        return (f"no host has {self.request.gpus} free {gpus} matching the request "
                f"({len(self.exclusions)} exclusions, {len(self.scored)} eligible GPUs)")


def place(
    request: PlacementRequest,
    candidates: CandidateSet,
    active_allocations: Mapping[tuple[str, int], AllocationInfo],
    now: float,
    *,
    rng: random.Random | None = None,
) -> PlacementResult:
    """Choose `request.gpus` GPUs on one host; pure (no I/O besides importing a user policy).

    A GPU's allocation comes from `active_allocations` (keyed by (host, index)) or, failing
    that, from the candidate itself. Ties are broken by host name, then GPU index, so the same
    inputs always give the same answer; with `rng`, hosts and GPUs scoring within
    TIE_TOLERANCE of the best are picked at random instead (used when retrying after losing a
    claim race, so racers spread out). Raises PolicyError for a bad policy.
    """
    policy = resolve_policy(request.policy)
    exclusions: list[Exclusion] = []
    blocked_hosts: set[str] = set()
    for host in candidates.hosts:
        reasons = host_exclusions(request, host)
        if reasons:
            blocked_hosts.add(host.name)
            exclusions.append(Exclusion(host.name, None, tuple(reasons)))
    known_hosts = {host.name for host in candidates.hosts}
    gpus = tuple(
        replace(gpu, allocation=active_allocations.get(gpu.key, gpu.allocation))
        for gpu in candidates.gpus
    )
    eligible: list[GpuCandidate] = []
    for gpu in gpus:
        if gpu.host in blocked_hosts:
            continue
        reasons = gpu_exclusions(request, gpu, gpu.allocation, now)
        if gpu.host not in known_hosts:
            reasons.insert(0, "host not in the inventory")
        if reasons:
            exclusions.append(Exclusion(gpu.host, gpu.index, tuple(reasons)))
        else:
            eligible.append(gpu)
    for host in candidates.hosts:
        if host.name not in blocked_hosts and not any(gpu.host == host.name for gpu in gpus):
            exclusions.append(Exclusion(host.name, None, ("no GPUs known on this host",)))
    view = PlacementView(request=request, now=now, hosts=candidates.hosts, gpus=gpus,
                         eligible=tuple(eligible))
    scored = [ScoredGpu(gpu, score_gpu(policy, request.policy, gpu, view)) for gpu in eligible]
    chosen_host, chosen = _choose(request, scored, exclusions, rng)
    chosen_keys = {item.gpu.key for item in chosen}
    final_scored = tuple(
        replace(item, chosen=item.gpu.key in chosen_keys)
        for item in sorted(scored, key=lambda item: (-item.score, item.gpu.host, item.gpu.index))
    )
    return PlacementResult(
        request=request,
        host=chosen_host,
        gpus=tuple(sorted((item.gpu for item in chosen), key=lambda gpu: gpu.index)),
        scored=final_scored,
        exclusions=tuple(exclusions),
        source=candidates.source,
        placed_at=now,
    )


def _choose(
    request: PlacementRequest, scored: list[ScoredGpu], exclusions: list[Exclusion],
    rng: random.Random | None,
) -> tuple[str | None, list[ScoredGpu]]:
    """The host whose best N GPUs have the highest mean score, and those GPUs.

    Hosts with fewer than N eligible GPUs get an exclusion saying so.
    """
    by_host: dict[str, list[ScoredGpu]] = {}
    for item in scored:
        by_host.setdefault(item.gpu.host, []).append(item)
    options: list[tuple[float, str, list[ScoredGpu]]] = []
    for host in sorted(by_host):
        ranked = sorted(by_host[host], key=lambda item: (-item.score, item.gpu.index))
        if len(ranked) < request.gpus:
            have = len(ranked)
            exclusions.append(Exclusion(host, None, (
                f"only {have} eligible GPU{'s' if have != 1 else ''} on this host, "
                f"{request.gpus} needed on one host",)))
            continue
        top = ranked[: request.gpus]
        if rng is not None:
            cutoff = top[-1].score - TIE_TOLERANCE
            top = rng.sample([item for item in ranked if item.score >= cutoff], request.gpus)
        options.append((sum(item.score for item in top) / len(top), host, top))
    if not options:
        return None, []
    best_score = max(option[0] for option in options)
    if rng is not None:
        _score, host, top = rng.choice([o for o in options if o[0] >= best_score - TIE_TOLERANCE])
        return host, top
    _score, host, top = next(option for option in options if option[0] == best_score)
    return host, top
