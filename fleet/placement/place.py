"""Pure placement: filter the candidates, score the eligible GPUs, pick N GPUs on one host
(or, for a gang, K GPUs on each of N hosts: fleet.placement.gang)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, replace

from fleet.placement.candidates import CandidateSet, GpuCandidate
from fleet.placement.filters import duplicate_gpus, gpu_exclusions, host_exclusions
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
class NodePlacement:
    """One node of a placement: its host and the GPUs chosen there (ascending index)."""

    host: str
    gpus: tuple[GpuCandidate, ...]

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """Indices of the chosen GPUs on the host."""
        return tuple(gpu.index for gpu in self.gpus)


@dataclass(frozen=True)
class PlacementResult:
    """Where the request fits (host and GPU indices), or that it fits nowhere, and why.

    For a gang (request.nodes > 1), `host` and `gpus` are rank 0's and `gang` holds every
    node in rank order.
    """

    request: PlacementRequest
    host: str | None
    gpus: tuple[GpuCandidate, ...]
    scored: tuple[ScoredGpu, ...]
    exclusions: tuple[Exclusion, ...]
    source: str
    placed_at: float
    gang: tuple[NodePlacement, ...] = ()

    @property
    def nodes(self) -> tuple[NodePlacement, ...]:
        """Every node chosen, in rank order (one for a single-host placement; none if unplaced)."""
        if self.gang:
            return self.gang
        return () if self.host is None else (NodePlacement(self.host, self.gpus),)

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
            where = "; ".join(f"{node.host} GPU {','.join(map(str, node.gpu_indices))}"
                              for node in self.nodes)
            return f"placed on {where} (policy {self.request.policy})"
        gpus = "GPU" if self.request.gpus == 1 else "GPUs"
        counts = f"({len(self.exclusions)} exclusions, {len(self.scored)} eligible GPUs)"
        if self.request.nodes > 1:
            same = f" sharing one {self.request.same} label value" if self.request.same else ""
            return (f"no {self.request.nodes} hosts{same} have {self.request.gpus} free {gpus} "
                    f"each matching the request {counts}")
        return f"no host has {self.request.gpus} free {gpus} matching the request {counts}"


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
    duplicates = duplicate_gpus(gpus)
    for gpu in gpus:
        if gpu.host in blocked_hosts:
            continue
        reasons = gpu_exclusions(request, gpu, gpu.allocation, now)
        if gpu.host not in known_hosts:
            reasons.insert(0, "host not in the inventory")
        if gpu.key in duplicates:
            reasons.insert(0, duplicates[gpu.key])
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
    gang: tuple[NodePlacement, ...] = ()
    if request.nodes > 1:
        from fleet.placement.gang import choose_gang

        nodes = choose_gang(request, candidates.hosts, host_options(request, scored, exclusions,
                                                                    rng), exclusions, rng)
        chosen = [item for _host, top in nodes for item in top]
        chosen_host = nodes[0][0] if nodes else None
        gang = tuple(NodePlacement(host, tuple(sorted((item.gpu for item in top),
                                                      key=lambda gpu: gpu.index)))
                     for host, top in nodes)
    else:
        chosen_host, chosen = _choose(request, scored, exclusions, rng)
    chosen_keys = {item.gpu.key for item in chosen}
    final_scored = tuple(
        replace(item, chosen=item.gpu.key in chosen_keys)
        for item in sorted(scored, key=lambda item: (-item.score, item.gpu.host, item.gpu.index))
    )
    return PlacementResult(
        request=request,
        host=chosen_host,
        gpus=gang[0].gpus if gang else tuple(sorted((item.gpu for item in chosen),
                                                    key=lambda gpu: gpu.index)),
        scored=final_scored,
        exclusions=tuple(exclusions),
        source=candidates.source,
        placed_at=now,
        gang=gang,
    )


def _choose(
    request: PlacementRequest, scored: list[ScoredGpu], exclusions: list[Exclusion],
    rng: random.Random | None,
) -> tuple[str | None, list[ScoredGpu]]:
    """The host whose best N GPUs have the highest mean score, and those GPUs."""
    options = host_options(request, scored, exclusions, rng)
    if not options:
        return None, []
    best_score = max(option[0] for option in options)
    if rng is not None:
        _score, host, top = rng.choice([o for o in options if o[0] >= best_score - TIE_TOLERANCE])
        return host, top
    _score, host, top = next(option for option in options if option[0] == best_score)
    return host, top


def host_options(
    request: PlacementRequest, scored: list[ScoredGpu], exclusions: list[Exclusion],
    rng: random.Random | None,
) -> list[tuple[float, str, list[ScoredGpu]]]:
    """(mean score, host, its best N GPUs) for every host with N eligible GPUs, by host name.

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
                f"{request.gpus} needed on one host"
                + (" per node" if request.nodes > 1 else ""),)))
            continue
        top = ranked[: request.gpus]
        if rng is not None:
            cutoff = top[-1].score - TIE_TOLERANCE
            top = rng.sample([item for item in ranked if item.score >= cutoff], request.gpus)
        options.append((sum(item.score for item in top) / len(top), host, top))
    return options
