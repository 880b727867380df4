"""Candidate rows: hosts seen by mDNS discovery (seen, gone, adopted), one row per service."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import Candidate, Host
from db.types import CandidateState


@dataclass(frozen=True, slots=True)
class CandidateIn:
    """One resolved service to record; (address, port, service_type) identifies its row.

    `ssh_port` is where the host's SSH listens (kept in txt_json with the TXT `summary`).
    """

    name: str
    address: str
    port: int
    service_type: str
    server: str | None
    ssh_port: int
    gpu_count: int | None = None
    gpu_model: str | None = None
    session: str | None = None
    summary: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CandidateRow:
    """A stored candidate."""

    id: int
    name: str
    address: str
    port: int
    service_type: str
    server: str | None
    ssh_port: int
    gpu_count: int | None
    gpu_model: str | None
    session: str | None
    summary: dict[str, object]
    first_seen: int
    last_seen: int
    state: str


def upsert_candidate(session: Session, seen: CandidateIn, now: int) -> int:
    """Insert or refresh the row of a service seen now; returns its id.

    A row already "adopted" stays adopted; a "gone" row becomes "seen" again.
    """
    row = session.scalars(
        select(Candidate).where(
            Candidate.address == seen.address,
            Candidate.port == seen.port,
            Candidate.service_type == seen.service_type,
        )
    ).first()
    if row is None:
        row = Candidate(
            address=seen.address,
            port=seen.port,
            service_type=seen.service_type,
            first_seen=now,
            state="seen",
        )
        session.add(row)
    elif row.state == "gone":
        row.state = "seen"
    row.name = seen.name[:255]
    row.server = seen.server[:255] if seen.server else None
    row.gpu_count = seen.gpu_count
    row.gpu_model = seen.gpu_model[:255] if seen.gpu_model else None
    row.session = seen.session[:255] if seen.session else None
    row.txt_json = json.dumps({"ssh_port": seen.ssh_port, "summary": seen.summary})
    row.last_seen = now
    session.flush()
    return row.id


def mark_gone(session: Session, candidate_ids: Iterable[int]) -> list[int]:
    """Mark candidates "gone" (adopted ones keep their state); returns the ids changed."""
    changed: list[int] = []
    for candidate_id in candidate_ids:
        row = session.get(Candidate, candidate_id)
        if row is not None and row.state == "seen":
            row.state = "gone"
            changed.append(row.id)
    session.flush()
    return changed


def set_candidate_state(session: Session, candidate_ids: Iterable[int],
                        state: CandidateState) -> None:
    """Set the state of the given candidates; raises LookupError for an unknown id."""
    for candidate_id in candidate_ids:
        row = session.get(Candidate, candidate_id)
        if row is None:
            raise LookupError(f"no candidate with id {candidate_id}")
        row.state = state
    session.flush()


def list_candidates(session: Session, states: Sequence[str] | None = None) -> list[CandidateRow]:
    """Stored candidates (optionally only some states), newest first."""
    query = select(Candidate).order_by(Candidate.last_seen.desc(), Candidate.id)
    if states:
        query = query.where(Candidate.state.in_(list(states)))
    return [_row(candidate) for candidate in session.scalars(query)]


def candidates_at(session: Session, address: str, ssh_port: int) -> list[CandidateRow]:
    """Every candidate row whose host answers SSH at (address, ssh_port)."""
    rows = session.scalars(select(Candidate).where(Candidate.address == address))
    return [row for row in (_row(candidate) for candidate in rows) if row.ssh_port == ssh_port]


def adopted_host_keys(session: Session) -> list[tuple[str, int]]:
    """(address, port) of every host stored with source "adopted"."""
    return [
        (address, port)
        for address, port in session.execute(
            select(Host.address, Host.port).where(Host.source == "adopted").order_by(Host.name)
        )
    ]


def _row(candidate: Candidate) -> CandidateRow:
    try:
        extra = json.loads(candidate.txt_json)
    except ValueError:
        extra = {}
    if not isinstance(extra, dict):
        extra = {}
    ssh_port = extra.get("ssh_port")
    summary = extra.get("summary")
    return CandidateRow(
        id=candidate.id,
        name=candidate.name,
        address=candidate.address,
        port=candidate.port,
        service_type=candidate.service_type,
        server=candidate.server,
        ssh_port=ssh_port if isinstance(ssh_port, int) else candidate.port,
        gpu_count=candidate.gpu_count,
        gpu_model=candidate.gpu_model,
        session=candidate.session,
        summary=summary if isinstance(summary, dict) else {},
        first_seen=candidate.first_seen,
        last_seen=candidate.last_seen,
        state=candidate.state,
    )
