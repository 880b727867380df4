"""`fleet status` through the server: the live snapshot as the HostStatus rows a probe gives."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleet.fanout import HostStatus
    from fleet.model import HostOutcome
    from fleet.snapshot import FleetSnapshot, HostSnapshot

# A host state as the outcome word `fleet status` prints ("down" was an unreachable probe).
_OUTCOMES: dict[str, HostOutcome] = {"up": "up", "down": "unreachable",
                                     "auth_failed": "auth_failed",
                                     "host_key_rejected": "host_key_rejected",
                                     "probe_error": "probe_error"}


def statuses_from_snapshot(snapshot: FleetSnapshot) -> list[HostStatus]:
    """One HostStatus per host of the snapshot, in its order (a host not read yet is
    unreachable "not probed yet by the server")."""
    return [_status(host, snapshot.taken_at) for host in snapshot.hosts]


def _status(host: HostSnapshot, taken_at: float) -> HostStatus:
    from fleet.fanout import HostStatus

    outcome = _OUTCOMES.get(host.state, "unreachable")
    reason = host.reason if host.state != "unknown" else "not probed yet by the server"
    report = host.report if outcome == "up" else None
    seen = host.last_seen if host.last_seen is not None else taken_at
    return HostStatus(host.spec, outcome, None if outcome == "up" else reason, report, 0.0, seen)
