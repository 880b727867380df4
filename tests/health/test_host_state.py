"""The host rule: every stored state × every outcome, decided and pending, and the vocabulary."""

from __future__ import annotations

import pytest

from db.types import HOST_STATES as STORED_STATES
from fleet.errors import AuthFailed, HostError, HostKeyRejected, HostUnreachable, ProbeError
from fleet.health.host_state import host_transition, known_state, outcome_of, state_reason
from fleet.model import HOST_OUTCOMES, HOST_STATES

# Row: the stored state; columns: the outcome. Cell: new state, and ":kind" when an event is
# written. Written out by hand on purpose: this table is the rule the README states.
DECIDED = """
previous           up              unreachable     auth_failed             host_key_rejected             probe_error
unknown            up              down:host_down  auth_failed:host_state  host_key_rejected:host_state  probe_error:host_state
up                 up              down:host_down  auth_failed:host_state  host_key_rejected:host_state  probe_error:host_state
down               up:host_up      down            auth_failed:host_state  host_key_rejected:host_state  probe_error:host_state
unreachable        up:host_up      down            auth_failed:host_state  host_key_rejected:host_state  probe_error:host_state
auth_failed        up:host_up      down:host_down  auth_failed             host_key_rejected:host_state  probe_error:host_state
host_key_rejected  up:host_up      down:host_down  auth_failed:host_state  host_key_rejected             probe_error:host_state
probe_error        up:host_up      down:host_down  auth_failed:host_state  host_key_rejected:host_state  probe_error
"""  # noqa: E501
SEVERITY = {"host_up": "info", "host_down": "error", "host_state": "warning"}


def _table() -> dict[tuple[str, str], tuple[str, str | None]]:
    header, *rows = (line.split() for line in DECIDED.strip().splitlines())
    table: dict[tuple[str, str], tuple[str, str | None]] = {}
    for previous, *cells in rows:
        for outcome, cell in zip(header[1:], cells, strict=True):
            state, _, kind = cell.partition(":")
            table[previous, outcome] = (state, kind or None)
    return table


TABLE = _table()
PAIRS = sorted(TABLE)


def test_the_table_covers_every_stored_state_and_outcome() -> None:
    assert set(TABLE) == {(p, o) for p in STORED_STATES for o in HOST_OUTCOMES}


@pytest.mark.parametrize(("previous", "outcome"), PAIRS)
def test_decided_outcome(previous: str, outcome: str) -> None:
    """One `fleet status` probe, or the monitor's host_down_after-th failure in a row."""
    state, kind = TABLE[previous, outcome]
    for failures, down_after in ((1, 1), (3, 3), (5, 3)):
        failures = 0 if outcome == "up" else failures
        transition = host_transition("gpu07", previous, outcome, "connection refused",
                                     failures=failures, down_after=down_after, now=50.0)
        assert not transition.pending
        assert transition.state == state
        event = transition.event
        assert (event.kind if event else None) == kind
        if event is not None:
            assert event.severity == SEVERITY[event.kind]
            assert (event.host, event.gpu_index, event.new_state) == ("gpu07", None, state)
            assert event.old_state == known_state(previous)
            assert event.data["from"] == known_state(previous) and event.data["to"] == state
            assert event.message.startswith(f"gpu07: {known_state(previous)} -> {state}")
            if outcome != "up":
                assert "connection refused" in event.message


@pytest.mark.parametrize(("previous", "outcome"), PAIRS)
def test_failure_before_the_threshold(previous: str, outcome: str) -> None:
    """The monitor's 1st and 2nd failure of 3: pending unless the host is already failing."""
    for failures in (1, 2):
        transition = host_transition("h", previous, outcome, "timed out",
                                     failures=0 if outcome == "up" else failures, down_after=3)
        if outcome != "up" and previous in ("unknown", "up"):
            assert transition.pending and transition.event is None
            assert transition.state == previous
        else:
            assert not transition.pending
            assert (transition.state, transition.event.kind if transition.event else None) \
                == TABLE[previous, outcome]


def test_counted_failures_are_in_the_event() -> None:
    transition = host_transition("h", "up", "unreachable", "timed out", failures=3, down_after=3)
    assert transition.event is not None and transition.event.data["failures"] == 3
    assert "after 3 failed probes" in transition.event.message


def test_one_vocabulary() -> None:
    # The database also accepts "unreachable", which earlier versions stored; it reads as "down".
    assert set(STORED_STATES) == set(HOST_STATES) | {"unreachable"}
    assert {known_state(state) for state in STORED_STATES} == set(HOST_STATES)
    assert known_state("garbage") == "unknown"
    assert set(HOST_OUTCOMES) - {"unreachable"} < set(HOST_STATES)


@pytest.mark.parametrize(("error", "outcome"), [
    (HostUnreachable("h", "refused"), "unreachable"),
    (AuthFailed("h", "denied"), "auth_failed"),
    (HostKeyRejected("h", "changed"), "host_key_rejected"),
    (ProbeError("h", "garbage"), "probe_error"),
    (HostError("h", "something else"), "probe_error"),
])
def test_errors_name_their_outcome(error: HostError, outcome: str) -> None:
    assert outcome_of(error) == outcome


def test_stored_reason() -> None:
    assert state_reason("unreachable", "refused") == "unreachable: refused"
    assert state_reason("probe_error", "garbage") == "garbage"
    assert state_reason("up", "ignored") is None
