"""`fleet monitor --http`: /metrics parsed by prometheus_client, /status, errors, loopback only."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleet.errors import ConfigError
from fleet.health.metrics import MetricFamily
from fleet.model import HostSpec
from fleet.reports import GpuReport, HostReport, ProbeReport
from fleet.server.status_site import parse_listen_address, start_status_site
from fleet.snapshot import AllocationInfo, FleetSnapshot, GpuSnapshot, HostSnapshot
from tests.server.conftest import ServeLabFactory

HOSTILE_MODEL = 'Sim "H100" \\ 80GB\nfake_metric 1'


def _snapshot() -> FleetSnapshot:
    gpu0 = GpuReport(0, uuid="GPU-a0", name=HOSTILE_MODEL, memory_total_bytes=80 << 30,
                     memory_used_bytes=1 << 30, utilization_gpu_pct=42.5, temperature_c=91.0,
                     power_draw_w=300.25)
    gpu1 = GpuReport(1, uuid="GPU-a1", name="Sim H100", lost=True, error="GPU is lost")
    report = ProbeReport(1, 1000.0, HostReport(load_1m=2.5, cpu_busy_pct=30.0), (gpu0, gpu1))
    alpha = HostSnapshot(
        spec=HostSpec("alpha", "10.0.0.1"), state="up", report=report, last_seen=1000.0,
        gpus=(
            GpuSnapshot("alpha", 0, gpu0, state="hot",
                        allocation=AllocationInfo(1, "task", "ann", task_id=7)),
            GpuSnapshot("alpha", 1, gpu1, state="failed", drained=True, drain_reason="RMA"),
        ),
    )
    beta = HostSnapshot(spec=HostSpec("beta", "10.0.0.2"), state="down", reason="timed out")
    return FleetSnapshot(taken_at=1001.5, hosts=(alpha, beta), changed=frozenset({"beta"}))


async def _get(port: int, path: str) -> tuple[int, str, str]:
    def fetch() -> tuple[int, str, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
                return reply.status, reply.headers["Content-Type"], reply.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers["Content-Type"], exc.read().decode()

    return await asyncio.to_thread(fetch)


async def test_metrics_parse_with_prometheus_client() -> None:
    extra = [MetricFamily("fleet_monitor_flushes", "Flushes.", "counter", [({}, 12.0)])]
    site = await start_status_site("127.0.0.1", 0, snapshot=_snapshot,
                                   extra_metrics=lambda: extra)
    try:
        status, content_type, body = await _get(site.port, "/metrics")
    finally:
        await site.close()
    assert status == 200 and content_type.startswith("text/plain; version=")
    families = {family.name: family for family in text_string_to_metric_families(body)}
    assert "fake_metric" not in families

    def value(name: str, **labels: str) -> float:
        matches = [s.value for s in families[name].samples
                   if all(s.labels.get(k) == v for k, v in labels.items())]
        assert len(matches) == 1, (name, labels, matches)
        return float(matches[0])

    assert value("fleet_gpu_utilization_percent", host="alpha", gpu="0") == 42.5
    assert value("fleet_gpu_temperature_celsius", model=HOSTILE_MODEL) == 91.0
    assert value("fleet_gpu_memory_total_bytes", uuid="GPU-a0") == 80 << 30
    assert value("fleet_gpu_power_watts", gpu="0") == 300.25
    assert value("fleet_gpu_state", gpu="0", state="hot") == 1
    assert value("fleet_gpu_state", gpu="0", state="ok") == 0
    assert value("fleet_gpu_state", gpu="1", state="failed") == 1
    assert value("fleet_gpu_drained", gpu="1") == 1
    assert value("fleet_gpu_allocated", gpu="0") == 1
    assert value("fleet_allocations", kind="task") == 1
    assert value("fleet_host_up", host="alpha") == 1
    assert value("fleet_host_up", host="beta") == 0
    assert value("fleet_host_state", host="beta", state="down") == 1
    assert value("fleet_host_load1", host="alpha") == 2.5
    assert [s.labels for s in families["fleet_host_load1"].samples] == [{"host": "alpha"}]
    assert value("fleet_snapshot_timestamp_seconds") == 1001.5
    assert value("fleet_monitor_flushes") == 12
    assert [s.labels.get("gpu") for s in families["fleet_gpu_power_watts"].samples] == ["0"]


async def test_status_json_and_errors() -> None:
    current: list[FleetSnapshot | None] = [None]
    site = await start_status_site("127.0.0.1", 0, snapshot=lambda: current[0])
    port = site.port
    try:
        status, _type, body = await _get(port, "/status")
        assert status == 503 and json.loads(body)["error"]["code"] == "not_ready"
        empty_metrics = await _get(port, "/metrics")
        assert empty_metrics[0] == 200
        assert list(text_string_to_metric_families(empty_metrics[2]))
        current[0] = _snapshot()
        status, content_type, body = await _get(port, "/status?pretty=0")
        assert (status, content_type) == (200, "application/json")
        data = json.loads(body)
        assert [h["spec"]["name"] for h in data["hosts"]] == ["alpha", "beta"]
        assert data["changed"] == ["beta"]
        assert data["hosts"][0]["gpus"][0]["reading"]["temperature_c"] == 91.0
        status, _type, body = await _get(port, "/nope")
        assert status == 404 and json.loads(body)["error"]["code"] == "not_found"
        assert (await _get(port, "/v1/status"))[0] == 404  # the API is never served over TCP
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = await asyncio.wait_for(reader.read(), 10)
        assert reply.startswith(b"HTTP/1.1 405") and b"Allow: GET,HEAD" in reply
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\n\r\n")
        reply = await asyncio.wait_for(reader.read(), 10)
        assert reply.split(b" ", 2)[1] == b"400" and b"Traceback" not in reply
        writer.close()
        assert (await _get(port, "/status"))[0] == 200  # still serving
    finally:
        await site.close()


async def test_refuses_non_loopback_unless_allowed() -> None:
    with pytest.raises(ConfigError, match="non-loopback"):
        await start_status_site("0.0.0.0", 0, snapshot=lambda: None)
    site = await start_status_site("localhost", 0, snapshot=lambda: None)
    await site.close()


def test_parse_listen_address() -> None:
    assert parse_listen_address("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert parse_listen_address("[::1]:9400") == ("::1", 9400)
    assert parse_listen_address("9401") == ("127.0.0.1", 9401)
    with pytest.raises(ConfigError, match="HOST:PORT"):
        parse_listen_address("localhost:http")


async def test_fleet_monitor_http_serves_status_and_metrics(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet.cli.main", "monitor", "-q", "--http", "127.0.0.1:0",
        cwd=lab.cli.home, env=lab.cli.env(lab.env()), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        assert process.stderr is not None
        line = await asyncio.wait_for(process.stderr.readline(), 30)
        match = re.search(rb"http://127\.0\.0\.1:(\d+)", line)
        assert match is not None, line
        port = int(match.group(1))
        for _ in range(100):  # until the monitor has read gpu1
            status, _type, body = await _get(port, "/status")
            if status == 200 and json.loads(body)["hosts"][0]["state"] == "up":
                break
            await asyncio.sleep(0.1)
        assert json.loads(body)["hosts"][0]["spec"]["name"] == "gpu1"
        metrics = {family.name: family for family in
                   text_string_to_metric_families((await _get(port, "/metrics"))[2])}
        assert [s.value for s in metrics["fleet_host_up"].samples] == [1.0]
        assert [s.value for s in metrics["fleet_monitor_readings_dropped"].samples] == [0.0]
        assert metrics["fleet_monitor_failed_writes"].type == "counter"
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 20)
    assert process.returncode == 0
