"""Bad input to the /v1 API over a real Unix socket: always a 400 with the error struct naming
the field, never a 500, and no task row for a refused submission."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web

from fleet.errors import ConfigError
from fleet.inventory import Inventory
from fleet.placement.request import MemorySize, PlacementRequest
from fleet.server.app import StatusSource, create_app
from fleet.server.identity import Identities
from fleet.server.jobs import Jobs
from fleet.server.routes import add_v1_routes
from fleet.server.stream import Broadcaster
from fleet.service import Fleet, open_database
from fleet.ssh.options import SshOptions
from fleet.wire.codec import encode
from fleet.wire.dispatch import SubmitRequest, UploadEntry

EMPTY = Inventory(hosts=(), path=None, groups={}, settings={}, settings_line=None)
HUGE = 2**63  # one past what an SQLite INTEGER holds


@dataclass
class Api:
    session: aiohttp.ClientSession
    service: Fleet
    staged: Path

    async def call(self, method: str, path: str, body: object = None,
                   raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
        data = raw if raw is not None else None if body is None else encode(body)
        async with self.session.request(method, f"http://fleet{path}", data=data) as reply:
            text = await reply.read()
            try:
                decoded = msgspec.json.decode(text)
            except msgspec.DecodeError:
                decoded = {"raw": text.decode(errors="replace")}
            return reply.status, decoded


@pytest.fixture
async def api(tmp_path: Path, short_dir: Path) -> AsyncIterator[Api]:
    """The /v1 app in this process on a Unix socket (no hosts), and a client of it."""
    service = Fleet(open_database(str(tmp_path / "fleet.db")), EMPTY, SshOptions())
    broadcaster = Broadcaster(4)
    staged = tmp_path / "staged"
    app = create_app(StatusSource(service.snapshot),
                     lambda app: add_v1_routes(app, service, Identities((), os.getuid()),
                                               broadcaster, Jobs(staged)))
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2)
    await runner.setup()
    path = short_dir / "a.sock"
    await web.UnixSite(runner, str(path)).start()
    session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(path)))
    try:
        yield Api(session, service, staged)
    finally:
        await session.close()
        broadcaster.close()
        await runner.cleanup()
        service.close()


def _bad_request(status: int, reply: dict[str, Any], *names: str) -> None:
    """A 400 with the API's error struct (a malformed request, or bad input the service
    refused), its message naming each of `names`."""
    assert status == 400, reply
    error = reply["error"]
    assert error["code"] in {"bad_request", "bad_input"} and error["exit_code"] == 2, reply
    for name in names:
        assert name in error["message"], reply


def _submission(files: tuple[UploadEntry, ...] = (UploadEntry("run.sh", b"echo hi\n"),),
                ) -> SubmitRequest:
    return SubmitRequest(files=files, extras=(), shown_script="run.sh", shown_extras=(),
                         placement=PlacementRequest().to_dict())


def _raw_submission(placement: object) -> bytes:
    """A submission whose placement is `placement`, as a hostile client would send it."""
    body = msgspec.to_builtins(_submission())
    body["placement"] = placement
    return msgspec.json.encode(body)


# --- placement --------------------------------------------------------------------------------

@pytest.mark.parametrize("fraction", ["x", [1], 0, 1.5, True])
async def test_a_fraction_that_is_not_a_number_in_range_is_refused_fast(
        api: Api, fraction: object) -> None:
    body = {"placement": {"min_free_memory": {"fraction": fraction}}}
    for path in ("/v1/place", "/v1/reservations"):
        started = time.monotonic()
        status, reply = await api.call("POST", path, body)
        assert time.monotonic() - started < 2.0
        _bad_request(status, reply, "$.placement.min_free_memory.fraction")


@pytest.mark.parametrize(("placement", "field"), [
    ({"hosts": 123}, "hosts"),
    ({"gpu_model": 5}, "gpu_model"),
    ({"min_free_memory": {"bytes": "lots"}}, "min_free_memory.bytes"),
    ({"min_free_memory": {"bytes": HUGE}}, "min_free_memory.bytes"),
    ({"gpus": 1.9}, "gpus"),
    ({"gpus": True}, "gpus"),
    ({"gpus": 0}, "gpus"),
    ({"gpus": 100_000}, "gpus"),
    ({"allow_unmanaged": "no"}, "allow_unmanaged"),
    ({"nodes": "2"}, "nodes"),
    ({"max_sample_age_s": "nan"}, "max_sample_age_s"),
    ({"labels": [["a"]]}, "labels"),
    ({"policy": ""}, "policy"),
    ({"no_such_field": 1}, "no_such_field"),
])
async def test_placement_fields_are_type_checked(
        api: Api, placement: dict[str, Any], field: str) -> None:
    status, reply = await api.call("POST", "/v1/place", {"placement": placement})
    _bad_request(status, reply, field)
    status, reply = await api.call("POST", "/v1/reservations", {"placement": placement})
    _bad_request(status, reply, field)


async def test_a_deeply_nested_placement_is_a_400(api: Api) -> None:
    depth = 30_000
    nested = b"[" * depth + b"]" * depth
    for value in (b'{"placement":{"hosts":' + nested + b"}}",
                  b'{"placement":{"x":' + nested + b"}}",
                  b'{"placement":' + nested + b"}"):
        status, reply = await api.call("POST", "/v1/place", raw=value)
        _bad_request(status, reply)


async def test_a_refused_submission_writes_no_task_row(api: Api) -> None:
    for placement in ({"hosts": 123}, {"min_free_memory": {"fraction": "x"}}, {"gpus": 1.9},
                      {"x": [[[[]]]]}):
        status, reply = await api.call("POST", "/v1/tasks", raw=_raw_submission(placement))
        _bad_request(status, reply, "placement")
    status, reply = await api.call(
        "POST", "/v1/tasks", raw=b'{"placement":' + b"[" * 30_000 + b"]" * 30_000 + b"}")
    _bad_request(status, reply)
    assert await api.service.tasks() == []
    assert not api.staged.exists() or not any(api.staged.iterdir())  # nothing left staged


# --- numbers out of range ---------------------------------------------------------------------

@pytest.mark.parametrize(("method", "path"), [
    ("GET", f"/v1/tasks/{HUGE}"),
    ("GET", f"/v1/tasks/{HUGE}/log"),
    ("POST", f"/v1/tasks/{HUGE}/cancel"),
    ("GET", f"/v1/tasks/{'9' * 5000}"),
])
async def test_a_huge_task_id_in_the_path_is_a_400(api: Api, method: str, path: str) -> None:
    status, reply = await api.call(method, path)
    _bad_request(status, reply, "task_id")


async def test_a_task_id_with_leading_zeros_is_still_that_id(api: Api) -> None:
    status, reply = await api.call("GET", f"/v1/tasks/{'0' * 30}7")
    assert status == 400 and "7" in reply["error"]["message"]
    assert reply["error"]["code"] == "bad_input", reply  # unknown task, not out of range


@pytest.mark.parametrize(("query", "name"), [
    (f"/v1/tasks?since={HUGE}", "since"),
    (f"/v1/tasks?limit={HUGE}", "limit"),
    (f"/v1/tasks?group={HUGE}", "group"),
    ("/v1/tasks?limit=-5", "limit"),
    (f"/v1/events?limit={HUGE}", "limit"),
    ("/v1/events?since=inf", "since"),
    ("/v1/events?since=nan", "since"),
    ("/v1/events?limit=-1", "limit"),
    (f"/v1/history/gpu?since=0&until=1e20&bucket_s={HUGE}", "until"),
    (f"/v1/history/gpu?since=0&until=100&bucket_s={HUGE}", "bucket_s"),
    ("/v1/history/gpu?since=-inf&until=inf", "since"),
    (f"/v1/history/gpu?since=0&until=100&gpu=gpu1:{'9' * 25}", "gpu"),
    ("/v1/history/host?since=0&until=1e300", "until"),
    ("/v1/usage?since=-1e300&until=1e300", "since"),
    ("/v1/usage?since=nan", "since"),
    ("/v1/usage?since=0&until=nan", "until"),
    (f"/v1/tasks/1/log?lost_after_s={HUGE}", "lost_after_s"),
])
async def test_an_out_of_range_query_value_is_a_400_naming_it(
        api: Api, query: str, name: str) -> None:
    status, reply = await api.call("GET", query)
    _bad_request(status, reply, name)


@pytest.mark.parametrize(("path", "body", "name"), [
    ("/v1/allocations/release", {"ids": [HUGE]}, "ids"),
    ("/v1/allocations/release", {"ids": [-1]}, "ids"),
    ("/v1/reservations/gpus", {"host": "gpu1", "gpu_indices": [HUGE]}, "gpu_indices"),
    ("/v1/reservations/gpus", {"host": "gpu1", "gpu_indices": [0], "duration_s": -1},
     "duration_s"),
    ("/v1/drain", {"target": "workstation:99999999999999999999999"}, "target"),
    ("/v1/undrain", {"target": f"workstation:{HUGE}"}, "target"),
    ("/v1/reservations", {"placement": {}, "duration_s": 1e300}, "duration_s"),
    ("/v1/reservations", {"placement": {}, "duration_s": -100}, "duration_s"),
    ("/v1/reservations", {"placement": {}, "duration_s": 0}, "duration_s"),
    (f"/v1/tasks/{1}/cancel", {"grace_s": -1}, "grace_s"),
])
async def test_an_out_of_range_body_value_is_a_400_naming_it(
        api: Api, path: str, body: dict[str, Any], name: str) -> None:
    status, reply = await api.call("POST", path, body)
    _bad_request(status, reply, name)


@pytest.mark.parametrize(("fields", "name"), [
    ({"priority": HUGE}, "priority"),
    ({"priority": -HUGE - 1}, "priority"),
    ({"wait": True, "queue_timeout_s": -5}, "queue_timeout_s"),
    ({"timeout_s": 1e300}, "timeout_s"),
    ({"grace_s": -1}, "grace_s"),
])
async def test_a_submission_out_of_range_is_refused_before_any_row(
        api: Api, fields: dict[str, Any], name: str) -> None:
    body = msgspec.to_builtins(_submission())
    body.update(fields)
    status, reply = await api.call("POST", "/v1/tasks", raw=msgspec.json.encode(body))
    _bad_request(status, reply, name)
    assert await api.service.tasks() == []


# --- staging ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("files", "named"), [
    ((UploadEntry("run.sh", b"x"), UploadEntry("a" * 300, b"y")), "a" * 300),
    ((UploadEntry("run.sh", b"x"), UploadEntry("f", b"y"), UploadEntry("f", b"z")), "'f'"),
    ((UploadEntry("run.sh", b"x"), UploadEntry("d"), UploadEntry("d")), "'d'"),
    ((UploadEntry("run.sh", b"x"), UploadEntry("d"), UploadEntry("d", b"z")), "'d'"),
    ((UploadEntry("run.sh", b"x"), UploadEntry("f", b"y"), UploadEntry("f")), "'f'"),
    ((UploadEntry("run.sh", b"x"), UploadEntry("run.sh", b"y")), "'run.sh'"),
], ids=["name-too-long", "file-twice", "dir-twice", "dir-then-file", "file-then-dir",
        "script-twice"])
async def test_files_that_cannot_be_staged_are_a_400_naming_the_path(
        api: Api, files: tuple[UploadEntry, ...], named: str) -> None:
    status, reply = await api.call("POST", "/v1/tasks", _submission(files=files))
    _bad_request(status, reply, named)
    assert await api.service.tasks() == []


# --- the engine's own checks (defence in depth) -----------------------------------------------

@pytest.mark.parametrize("fraction", ["x", [1], 0.0, 2.0, float("nan"), True])
def test_memory_size_refuses_a_fraction_that_is_not_a_number_in_range(fraction: Any) -> None:
    with pytest.raises(ConfigError, match="fraction"):
        MemorySize(fraction=fraction)


@pytest.mark.parametrize("size", ["lots", -1, HUGE, 1.5, True])
def test_memory_size_refuses_bytes_that_are_not_a_whole_number_in_range(size: Any) -> None:
    with pytest.raises(ConfigError, match="bytes"):
        MemorySize(bytes=size)


@pytest.mark.parametrize("data", [
    {"gpus": 1.9}, {"gpus": True}, {"gpus": "2"}, {"nodes": "2"}, {"hosts": 123},
    {"gpu_model": 5}, {"allow_unmanaged": "no"}, {"max_sample_age_s": "nan"},
    {"max_sample_age_s": float("nan")}, {"max_util": "50"}, {"min_free_memory": "20G"},
    {"min_free_memory": {"fraction": "x"}}, {"labels": [["a", 1]]}, {"labels": "ab"},
    {"exclude_hosts": "gpu1"}, {"exclude_hosts": [["gpu1"]]}, {"policy": 3},
])
def test_placement_from_dict_refuses_wrong_types(data: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        PlacementRequest.from_dict(data)


def test_placement_to_dict_round_trips_through_the_wire() -> None:
    from fleet.wire.codec import decode
    from fleet.wire.dispatch import PlaceRequest

    request = PlacementRequest(gpus=2, min_free_memory=MemorySize(fraction=0.5), max_util=50,
                               max_temp=80.5, hosts="gpu*", labels=(("rack", "b*"),),
                               allow_unmanaged=True, exclude_hosts=frozenset({"gpu9"}),
                               nodes=2, same="rack")
    wire = decode(encode(PlaceRequest(request.to_dict())), PlaceRequest)
    assert PlacementRequest.from_dict(wire.placement) == request
