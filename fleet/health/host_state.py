"""The one rule that turns a host's stored state and one probe outcome into its new state and event.

`fleet status` (fleet.recorder) and the monitor (fleet.monitor.writer) both apply it to the state
stored in the database at the moment they write (fleet.health.apply.record_host_outcome), so the
two paths use the same words and an event is written only when the stored state really changes.

Outcome -> state (the words of fleet.model.HostOutcome and HostState):

    up                   the host answered with a usable reading                -> up
    unreachable          connect refused or timed out, login timed out,
                         connection lost                                        -> down
    auth_failed          the host refused every credential                      -> auth_failed
    host_key_rejected    unknown or changed host key                            -> host_key_rejected
    probe_error          logged in, but the probe failed, crashed, printed
                         garbage or stayed silent past its deadline             -> probe_error

A host that answers is never "down", however often its probe fails: "down" means it could not be
reached; "probe_error" means it was reached and needs python3, the driver or NVML looked at.

A failure is decided after `down_after` consecutive failed outcomes (the monitor: one per interval,
`health.host_down_after`); `fleet status` decides at once (failures = down_after = 1: its one
probe has already waited its whole --timeout), and so does a host already in a failed state (it
follows its latest failure). Until decided the failure is pending: the state stays as stored and
nothing is written.

Events, one per real change: host_down (error) entering "down"; host_state (warning) entering
"auth_failed", "host_key_rejected" or "probe_error"; host_up (info) leaving a failed state for
"up". "unknown" -> "up" writes none. "unreachable", stored by earlier versions of fleet for an
unreachable host, reads as "down".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleet.errors import AuthFailed, HostError, HostKeyRejected, HostUnreachable
from fleet.health.changes import HealthChange
from fleet.model import HOST_STATES, HostOutcome, HostState

if TYPE_CHECKING:
    from db.types import Severity

FAILED_STATES: frozenset[HostState] = frozenset(
    {"down", "auth_failed", "host_key_rejected", "probe_error"}
)


@dataclass(frozen=True)
class HostTransition:
    """What one outcome does to a host: its state afterwards, and the event to write, if any.

    `pending` is True for a failure not yet decided: nothing is to be written.
    """

    state: HostState
    event: HealthChange | None = None
    pending: bool = False


def known_state(stored: str) -> HostState:
    """A stored state word in today's vocabulary ("unreachable" from older versions is "down")."""
    if stored == "unreachable":
        return "down"
    for state in HOST_STATES:
        if state == stored:
            return state
    return "unknown"


def outcome_state(outcome: HostOutcome) -> HostState:
    """The state a decided outcome puts a host in."""
    return "down" if outcome == "unreachable" else outcome


def outcome_of(error: HostError) -> HostOutcome:
    """The outcome word of a failed contact; a HostError of no other kind is a probe_error."""
    if isinstance(error, HostUnreachable):
        return "unreachable"
    if isinstance(error, AuthFailed):
        return "auth_failed"
    if isinstance(error, HostKeyRejected):
        return "host_key_rejected"
    return "probe_error"


def state_reason(outcome: HostOutcome, reason: str | None) -> str | None:
    """The state_reason stored with a decided outcome ("unreachable: REASON" for "down")."""
    if outcome == "up":
        return None
    if outcome == "unreachable":
        return f"unreachable: {reason}" if reason else "unreachable"
    return reason


def host_transition(
    host: str,
    previous: str,
    outcome: HostOutcome,
    reason: str | None = None,
    *,
    failures: int = 1,
    down_after: int = 1,
    now: float | None = None,
) -> HostTransition:
    """Apply the rule (module docstring) to `host`, stored as `previous`, seeing `outcome`.

    `failures` counts the consecutive failed outcomes including this one (0 for "up"); the
    defaults are `fleet status`'s. `now` (epoch seconds) goes into the event data.
    """
    before = known_state(previous)
    if outcome != "up" and before not in FAILED_STATES and failures < down_after:
        return HostTransition(before, pending=True)
    after = outcome_state(outcome)
    if after == before:
        return HostTransition(after)
    kind: str
    severity: Severity
    if after == "up":
        if before not in FAILED_STATES:
            return HostTransition(after)
        kind, severity = "host_up", "info"
    elif after == "down":
        kind, severity = "host_down", "error"
    else:
        kind, severity = "host_state", "warning"
    counted = f" after {failures} failed probes" if failures > 1 else ""
    why = f" ({outcome}: {reason})" if reason else ("" if after == "up" else f" ({outcome})")
    data: dict[str, object] = {"from": before, "to": after, "outcome": outcome,
                               "reason": reason, "failures": failures}
    if now is not None:
        data["at"] = now
    return HostTransition(after, HealthChange(
        host, None, kind, severity, before, after, f"{host}: {before} -> {after}{counted}{why}",
        data,
    ))
