"""Choosing the hosts of a gang: N hosts with K eligible GPUs each, optionally on one label value.

Each host is ranked by the mean score of its best K GPUs (as for a single-host placement); the
gang takes the N best hosts. With `same`, hosts are grouped by that label's value, each group
is ranked by the mean over its N best hosts, and the best group wins (ties: the lower value).
Ties between hosts are broken by name; with `rng` (retrying after a lost claim race), hosts
within TIE_TOLERANCE of the N-th best are drawn at random so racers spread out.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleet.placement.candidates import HostCandidate
    from fleet.placement.place import Exclusion, ScoredGpu
    from fleet.placement.request import PlacementRequest

HostOption = tuple[float, str, list["ScoredGpu"]]


def choose_gang(
    request: PlacementRequest,
    hosts: Sequence[HostCandidate],
    options: list[HostOption],
    exclusions: list[Exclusion],
    rng: random.Random | None,
) -> list[tuple[str, list[ScoredGpu]]]:
    """The gang's nodes in rank order (best host first) as (host, its chosen GPUs); [] if the
    request cannot be met. Hosts without the `same` label get an exclusion saying so."""
    from fleet.placement.place import Exclusion

    if request.same is None:
        return _best_nodes(options, request.nodes, rng)
    label_of = {host.name: host.label(request.same) for host in hosts}
    groups: dict[str, list[HostOption]] = {}
    for option in options:
        value = label_of.get(option[1])
        if value is None:
            exclusions.append(Exclusion(option[1], None,
                                        (f"no label {request.same!r} (--same)",)))
            continue
        groups.setdefault(value, []).append(option)
    best: tuple[float, str, list[tuple[str, list[ScoredGpu]]]] | None = None
    for value in sorted(groups):
        nodes = _best_nodes(groups[value], request.nodes, rng)
        if not nodes:
            for _score, host, _top in groups[value]:
                exclusions.append(Exclusion(host, None, (
                    f"{request.same}={value}: only {len(groups[value])} of the "
                    f"{request.nodes} hosts needed have the GPUs",)))
            continue
        score = _mean(nodes)
        if best is None or score > best[0]:
            best = (score, value, nodes)
    return [] if best is None else best[2]


def _best_nodes(options: list[HostOption], count: int, rng: random.Random | None
                ) -> list[tuple[str, list[ScoredGpu]]]:
    """The `count` best hosts (mean score, then name); at random near the cut with `rng`."""
    from fleet.placement.place import TIE_TOLERANCE

    if len(options) < count:
        return []
    ranked = sorted(options, key=lambda option: (-option[0], option[1]))
    if rng is not None:
        cutoff = ranked[count - 1][0] - TIE_TOLERANCE
        sure = [option for option in ranked if option[0] > ranked[count - 1][0] + TIE_TOLERANCE]
        near = [option for option in ranked if cutoff <= option[0]
                and option not in sure]
        ranked = sure + rng.sample(near, count - len(sure))
        ranked.sort(key=lambda option: (-option[0], option[1]))
    return [(host, top) for _score, host, top in ranked[:count]]


def _mean(nodes: list[tuple[str, list[ScoredGpu]]]) -> float:
    scores = [item.score for _host, top in nodes for item in top]
    return sum(scores) / len(scores)
