"""Candidates: recording a browse in the database and the per-host view merged with known hosts.

A host can announce several services (`_ssh._tcp`, `_fleet._tcp`, `_gpu-sd._tcp`...): the
database keeps one row per service, the view groups them by the host's SSH endpoint
(address, ssh port), which is also how inventory hosts are identified, so a host already in the
inventory or database is shown as "known" instead of a second entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from db.candidates import CandidateIn, CandidateRow, list_candidates, mark_gone, upsert_candidate
from fleet.discovery.browse import BrowseResult, DiscoveredService

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

# Which service's name and GPU summary wins when a host announces several.
_TYPE_PREFERENCE = ("_fleet._tcp", "_gpu-sd._tcp", "_hwgpus._tcp", "_net-sd._tcp",
                    "_ssh._tcp", "_sftp-ssh._tcp")


@dataclass(frozen=True)
class KnownHost:
    """A host fleet already manages, by (address, port)."""

    name: str
    source: str  # "inventory", "adopted", ...


@dataclass(frozen=True)
class CandidateView:
    """One discovered host (all its services) as the CLI and TUI show it.

    state: "new" (seen, not managed), "known" (in the inventory or database), "adopted",
    or "gone" (said goodbye, or did not answer the last browse).
    """

    name: str
    address: str
    ssh_port: int
    service_types: tuple[str, ...]
    gpu_count: int | None
    gpu_model: str | None
    session: str | None
    state: str
    known_as: str | None
    server: str | None
    first_seen: int
    last_seen: int
    problems: tuple[str, ...]
    candidate_ids: tuple[int, ...]

    @property
    def endpoint(self) -> str:
        """`address:port`, IPv6 bracketed."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.ssh_port}"

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "name": self.name, "address": self.address, "ssh_port": self.ssh_port,
            "services": list(self.service_types), "gpu_count": self.gpu_count,
            "gpu_model": self.gpu_model, "session": self.session, "state": self.state,
            "known_as": self.known_as, "server": self.server, "first_seen": self.first_seen,
            "last_seen": self.last_seen, "problems": list(self.problems),
        }


def candidate_in(service: DiscoveredService) -> CandidateIn:
    """The database record of one resolved service."""
    summary = service.summary
    return CandidateIn(
        name=service.display_name, address=service.address, port=service.port,
        service_type=service.service_type, server=service.server, ssh_port=service.ssh_port,
        gpu_count=summary.gpu_count, gpu_model=summary.gpu_model, session=summary.session,
        summary=summary.as_dict(),
    )


def record_browse(session: Session, result: BrowseResult, browsed_types: Iterable[str],
                  now: int) -> set[int]:
    """Store a browse: seen services refreshed, goodbyes and silent services marked gone.

    A stored "seen" row of a browsed type that did not answer this browse is "gone" (failed
    re-resolve). Returns the ids of the rows this browse touched.
    """
    touched: set[int] = set()
    seen_ids: set[int] = set()
    for service in result.services:
        candidate_id = upsert_candidate(session, candidate_in(service), now)
        seen_ids.add(candidate_id)
    removed_ids = [upsert_candidate(session, candidate_in(service), now)
                   for service in result.removed]
    types = set(browsed_types)
    silent = [row.id for row in list_candidates(session, ["seen"])
              if row.service_type in types and row.id not in seen_ids]
    touched.update(seen_ids)
    touched.update(mark_gone(session, [*removed_ids, *silent]))
    session.commit()
    return touched


def build_views(rows: Sequence[CandidateRow], known: Mapping[tuple[str, int], KnownHost],
                *, session_name: str | None = None) -> list[CandidateView]:
    """Group candidate rows by SSH endpoint and merge them with known hosts."""
    groups: dict[tuple[str, int], list[CandidateRow]] = {}
    for row in rows:
        groups.setdefault((row.address, row.ssh_port), []).append(row)
    views = [_view(key, group, known.get(key)) for key, group in groups.items()]
    if session_name is not None:
        views = [view for view in views if view.session == session_name]
    return sorted(views, key=lambda view: (view.state == "gone", view.name, view.endpoint))


def _preference(row: CandidateRow) -> int:
    kind = row.service_type
    return _TYPE_PREFERENCE.index(kind) if kind in _TYPE_PREFERENCE else len(_TYPE_PREFERENCE)


def _view(key: tuple[str, int], group: list[CandidateRow], known: KnownHost | None) -> \
        CandidateView:
    ordered = sorted(group, key=_preference)
    live = [row for row in ordered if row.state != "gone"]
    if known is not None:
        state = "adopted" if known.source == "adopted" else "known"
    elif not live:
        state = "gone"
    elif any(row.state == "adopted" for row in ordered):
        state = "adopted"
    else:
        state = "new"
    problems: list[str] = []
    for row in ordered:
        listed = row.summary.get("problems")
        if isinstance(listed, list):
            problems.extend(f"{row.service_type}: {item}" for item in listed if
                            isinstance(item, str))
    return CandidateView(
        name=ordered[0].name,
        address=key[0],
        ssh_port=key[1],
        service_types=tuple(row.service_type for row in ordered),
        gpu_count=next((row.gpu_count for row in ordered if row.gpu_count is not None), None),
        gpu_model=next((row.gpu_model for row in ordered if row.gpu_model), None),
        session=next((row.session for row in ordered if row.session), None),
        state=state,
        known_as=known.name if known is not None else None,
        server=next((row.server for row in ordered if row.server), None),
        first_seen=min(row.first_seen for row in ordered),
        last_seen=max(row.last_seen for row in ordered),
        problems=tuple(problems),
        candidate_ids=tuple(row.id for row in ordered),
    )
