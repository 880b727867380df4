"""Wire structs: engine dataclasses survive JSON both ways, bad bodies are refused, errors map."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from db.rows import AllocationDetail, EventView, HostHistoryPoint, TaskGpu, TaskRow
from db.types import GpuHistoryPoint, HostRow
from fleet import errors
from fleet.dispatch.ending import Ending
from fleet.health.drain import DrainOutcome
from fleet.model import HostSpec
from fleet.reports import GpuReport, HostReport, ProbeReport, ProcessInfo
from fleet.snapshot import AllocationInfo, FleetSnapshot, GpuSnapshot, HostSnapshot
from fleet.wire import allocations, dispatch, drain, events, history, hosts, snapshot, tasks
from fleet.wire.codec import WireError, decode, encode
from fleet.wire.errors import ErrorReply, error_from_wire, error_to_wire

# HostSpec fields that stay on the server (a key path, the host's Python, the inventory line).
SERVER_ONLY = {"identity_file", "ssh_config_identity_files", "ssh_config_host", "python",
               "source"}


def _snapshot() -> FleetSnapshot:
    gpu = GpuReport(0, uuid="GPU-a0", name='Sim "H100"\n', memory_total_bytes=80 << 30,
                    temperature_c=91.5, processes=(ProcessInfo(12, 1 << 30, "python"),))
    report = ProbeReport(1, 1000.0, HostReport(load_1m=2.5), (gpu,), warnings=("w",))
    spec = HostSpec("alpha", "10.0.0.1", 2222, "ann", groups=("a100",), labels=(("rack", "b"),))
    host = HostSnapshot(spec, "up", report=report, last_seen=1000.0, gpus=(
        GpuSnapshot("alpha", 0, gpu, "hot", True, "RMA",
                    AllocationInfo(3, "task", "ann", task_id=7, task_name="train")),))
    return FleetSnapshot(1001.5, (host, HostSnapshot(HostSpec("beta", "b"), "down", "timeout")),
                         frozenset({"beta", "alpha"}))


def test_snapshot_round_trip_equals_the_engine_value() -> None:
    original = _snapshot()
    data = encode(snapshot.snapshot_to_wire(original))
    assert b"identity_file" not in data
    assert msgspec.json.decode(data)["changed"] == ["alpha", "beta"]  # sorted: stable output
    back = snapshot.snapshot_from_wire(decode(data, snapshot.SnapshotWire))
    assert back == original


def test_rows_round_trip() -> None:
    task = TaskRow(1, "t", "t.py", ("a", "b c"), 4, "gpu1", "running", None, 2,
                   {"timeout_s": 5.0, "placement": {"gpus": 2}}, 0, "ann", "/d", 77, 10, 11,
                   None, None, None, None, (TaskGpu(9, 8, "gpu1", 0, "GPU-0", True),), False)
    reply = decode(encode(tasks.tasks_to_wire([task])), tasks.TaskList)
    assert tasks.tasks_from_wire(reply) == [task]
    event = EventView(1, 10, "host_down", "warning", "x", "gpu1", None, None, None, {"k": [1]})
    assert events.events_from_wire(decode(encode(events.events_to_wire([event])),
                                          events.EventList)) == [event]
    detail = AllocationDetail(1, 2, "gpu1", 0, None, "reservation", "ann", None, None, None,
                              "why", 10, None, None, None)
    assert allocations.allocations_from_wire(decode(
        encode(allocations.allocations_to_wire([detail])), allocations.AllocationList)) == [detail]
    outcome = DrainOutcome("gpu1", 1, True, True, "fan", 4)
    assert drain.drain_from_wire(decode(encode(drain.drain_to_wire(outcome)),
                                        drain.DrainResult)) == outcome
    row = HostRow(1, "gpu1", "10.0.0.1", 22, None, "ssh", "inventory", ("g",), (("k", "v"),),
                  "up", None, False, None, "h", "k", "550", "12.4", 8, 1 << 30, 2, 1, 2, 3)
    assert hosts.hosts_from_wire(decode(encode(hosts.hosts_to_wire([row])),
                                        hosts.HostList)) == [row]
    point = GpuHistoryPoint("gpu1", 0, "GPU-1", 7, 1_700_000_000_000, 3, 50.0, 90.0, 1e9,
                            2 << 30, 40.5, 41.0, None, None)
    assert history.history_from_wire(decode(encode(history.history_to_wire([point])),
                                            history.GpuHistoryList)) == [point]
    host_point = HostHistoryPoint("gpu1", 1_700_000_000_000, 4, 0.5, 1.25, 12.5, 40.0,
                                  1 << 30, 1.5e9, 10, 20, None, 3.5)
    assert history.host_history_from_wire(decode(
        encode(history.host_history_to_wire([host_point])), history.HostHistoryList)) == \
        [host_point]


def test_a_task_recorded_with_undecodable_arguments_still_lists() -> None:
    # Arguments from non-UTF-8 bytes (stored before they were refused, as surrogates) used to
    # make every `GET /v1/tasks` a 500: one old row broke `fleet tasks` for everyone.
    task = TaskRow(1, "t", "t.py", ("a\udcff", "b"), None, None, "failed", 1, 0, {}, 0, "ann",
                   None, None, 10, None, 11, "bad\ud800", None, None, (), False)
    [listed] = tasks.tasks_from_wire(decode(encode(tasks.tasks_to_wire([task])),
                                            tasks.TaskList))
    assert listed.args == ("a\\xff", "b")  # the byte, shown escaped
    assert listed.error == "bad\\ud800"
    assert listed == dataclasses.replace(task, args=listed.args, error=listed.error)


@pytest.mark.parametrize(("engine", "wire", "omitted"), [
    (TaskRow, tasks.TaskWire, set()), (EventView, events.EventWire, set()),
    (AllocationDetail, allocations.AllocationWire, set()), (HostRow, hosts.HostWire, set()),
    (DrainOutcome, drain.DrainResult, set()), (GpuReport, snapshot.GpuReadingWire, set()),
    (HostReport, snapshot.HostReadingWire, set()), (ProbeReport, snapshot.ProbeReportWire, set()),
    (HostSnapshot, snapshot.HostSnapshotWire, set()),
    (GpuSnapshot, snapshot.GpuSnapshotWire, set()),
    (HostSpec, snapshot.HostSpecWire, SERVER_ONLY), (HostSpec, hosts.ManagedHostWire, set()),
    (GpuHistoryPoint, history.GpuHistoryPointWire, set()), (Ending, dispatch.EndedEvent, set()),
    (HostHistoryPoint, history.HostHistoryPointWire, set()),
])
def test_wire_structs_name_every_engine_field(engine: type, wire: type[msgspec.Struct],
                                              omitted: set[str]) -> None:
    """A field added to an engine type must be added to its wire struct (or listed here)."""
    engine_fields = (set(engine.__struct_fields__) if issubclass(engine, msgspec.Struct)
                     else {field.name for field in dataclasses.fields(engine)})
    assert set(wire.__struct_fields__) == engine_fields - omitted


@pytest.mark.parametrize("body", [b"{", b"[]", b'{"target": 3}', b'{"target": "x", "evil": 1}',
                                  b'{"reason": "no target"}'])
def test_malformed_request_bodies_are_wire_errors(body: bytes) -> None:
    with pytest.raises(WireError):
        decode(body, drain.DrainRequest)


@pytest.mark.parametrize("error", [
    errors.PermissionDenied("bob is not permitted"), errors.ConfigError("bad", path="f", line=3),
    errors.NoPlacement("none fits", explanation="gpu1: busy"), errors.StorageError("locked"),
    errors.HostUnreachable("gpu1", "timed out"), errors.DispatchError("lost"),
    errors.AllocationConflict("taken"),
])
def test_errors_come_back_as_the_same_class_and_exit_code(error: errors.FleetError) -> None:
    status, reply = error_to_wire(error)
    assert 400 <= status < 600
    body = decode(encode(reply), ErrorReply).error
    back = error_from_wire(body)
    assert type(back) is type(error)
    assert (str(back), back.exit_code, body.exit_code) == (str(error), error.exit_code,
                                                           error.exit_code)
    if isinstance(error, errors.NoPlacement):
        assert isinstance(back, errors.NoPlacement) and back.explanation == "gpu1: busy"


def test_an_unlisted_subclass_keeps_its_exit_code() -> None:
    class Odd(errors.FleetError):
        exit_code = 42

    _status, reply = error_to_wire(Odd("odd"))
    assert error_from_wire(reply.error).exit_code == 42


def test_a_reconcile_report_with_ended_tasks_encodes() -> None:
    """Task ids are ints: as map keys the deterministic encoder would refuse them (a 500 on
    every `fleet tasks` through the server after a task ended unseen)."""
    reply = tasks.ReconcileResult(((7, "succeeded"), (9, "lost")), [3], {"gpu2": "timed out"})
    back = decode(encode(reply), tasks.ReconcileResult)
    assert dict(back.ended) == {7: "succeeded", 9: "lost"} and back.still_running == [3]
