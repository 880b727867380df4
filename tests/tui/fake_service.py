"""A FleetService the TUI tests control: fixed time and fleet, recorded actions, pushed updates."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace

import msgspec

from fleet.errors import AllocationConflict, DispatchError
from fleet.model import HostSpec
from fleet.reports import GpuReport, HostReport, ProbeReport, ProcessInfo
from fleet.snapshot import AllocationInfo, FleetSnapshot, GpuSnapshot, HostSnapshot
from tui.service import (
    AllocationView,
    CandidateView,
    DiscoveryScope,
    DispatchRequest,
    EventView,
    GpuHistory,
    HistoryPoint,
    HostKeyFingerprint,
    PlacementPreview,
    TaskView,
    UserUsageView,
)

NOW = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC: every test sees this clock
NOW_S = int(NOW)  # the same, as the integer epoch seconds fleet stores
GIB = 1024**3
LONG_NAME = "a-very-long-hostname-for-the-gpu-cluster-node-0042"


def gpu(host: str, index: int, model: str, total_gib: int, util: float | None, used_gib: float,
        temp: float | None, power: float | None, *, state: str = "ok",
        allocation: AllocationInfo | None = None, drained: bool = False,
        processes: int = 0) -> GpuSnapshot:
    """One GPU snapshot with the values the screens show."""
    reading = GpuReport(
        index=index, uuid=f"GPU-{host}-{index}", name=model,
        memory_total_bytes=total_gib * GIB, memory_used_bytes=int(used_gib * GIB),
        utilization_gpu_pct=util, temperature_c=temp, power_draw_w=power, power_limit_w=700.0,
        processes=tuple(ProcessInfo(4000 + index * 10 + p, 2 * GIB, "python train.py")
                        for p in range(processes)))
    return GpuSnapshot(host=host, index=index, reading=reading, state=state, drained=drained,
                       allocation=allocation)


def host(name: str, gpus: Sequence[GpuSnapshot], *, state: str = "up", reason: str | None = None,
         drained: bool = False, load: float | None = 1.5, last_seen: float = NOW - 2,
         groups: tuple[str, ...] = (), gpu_reason: str | None = None) -> HostSnapshot:
    """One host snapshot with a probe report."""
    report = ProbeReport(schema=1, timestamp=last_seen, host=HostReport(
        hostname=name, kernel="6.1.0-18-amd64", driver_version="550.54.15",
        cuda_driver_version="12.4", cpu_count=64, load_1m=load, load_5m=load, load_15m=load,
        memory_total_bytes=512 * GIB, memory_available_bytes=300 * GIB, python_version="3.11.2"),
        gpus=tuple(g.reading for g in gpus), gpu_reason=gpu_reason)
    return HostSnapshot(spec=HostSpec(name=name, address=f"10.0.0.{len(name) % 250}",
                                      groups=groups, labels=(("rack", "r1"),)),
                        state=state, reason=reason, report=report, last_seen=last_seen,
                        drained=drained, drain_reason="maintenance" if drained else None,
                        gpus=tuple(gpus))


def standard_fleet() -> FleetSnapshot:
    """The fleet every screen test sees: busy, idle, hot, down, drained, odd hosts."""
    train = AllocationInfo(allocation_id=1, kind="task", owner="ana", task_id=12,
                           task_name="train-llm")
    reserved = AllocationInfo(allocation_id=2, kind="reservation", owner="bob")
    atlas = [gpu("atlas", i, "NVIDIA H100 80GB HBM3", 80, 97 if i < 2 else 3,
                 70 if i < 2 else 0.3,
                 71 if i < 2 else 34, 650 if i < 2 else 70,
                 allocation=train if i < 2 else reserved if i == 2 else None,
                 processes=1 if i < 2 else 0) for i in range(8)]
    boreas = [gpu("boreas", i, "NVIDIA A100-SXM4-40GB", 40, 60 + i * 10, 20 + i * 4, 70 + i * 6,
                  300 + i * 20, state="hot" if i == 3 else "ok") for i in range(4)]
    cygnus = [gpu("cygnus", i, "NVIDIA GeForce RTX 4090", 24, 0, 0.4, 31, 18) for i in range(2)]
    draco = [gpu("draco", 0, "NVIDIA L4", 24, None, 0, None, None)]
    eridanus = [gpu("eridanus", i, "NVIDIA A100-SXM4-80GB", 80, 0, 0.5, 30, 55, drained=True)
                for i in range(4)]
    odd = [GpuSnapshot(host=LONG_NAME, index=0, reading=GpuReport(index=0))]
    hosts = (
        host("atlas", atlas, groups=("h100",), load=12.25),
        host("boreas", boreas, groups=("a100",)),
        host("cygnus", cygnus, load=0.1),
        host("draco", draco, state="unreachable", reason="no answer within 10s",
             last_seen=NOW - 300),
        host("eridanus", eridanus, drained=True, groups=("a100",)),
        host("fornax", [], gpu_reason="no NVIDIA driver", load=0.0),
        host(LONG_NAME, odd, load=None),
    )
    return FleetSnapshot(taken_at=NOW, hosts=hosts, changed=frozenset(h.spec.name for h in hosts))


@dataclass
class FakeService:
    """Implements tui.service.FleetService from in-memory state; records every action."""

    snapshot: FleetSnapshot = field(default_factory=standard_fleet)
    calls: list[tuple[object, ...]] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=lambda: [f"step {i} loss {1 / (i + 1):.3f}"
                                                          for i in range(5)])
    fail_dispatch: bool = False
    next_task_id: int = 40
    scan_finds: list[CandidateView] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.queue: asyncio.Queue[FleetSnapshot] = asyncio.Queue()
        self.queue.put_nowait(self.snapshot)
        self.task_list = [
            TaskView(12, "train-llm", "running", "ana", "atlas", (0, 1), NOW - 4000,
                     NOW - 3990),
            TaskView(11, "eval-sweep", "succeeded", "bob", "boreas", (2,), NOW - 9000,
                     NOW - 8990, NOW - 7000, 0),
            TaskView(10, "broken-job", "failed", "ana", "cygnus", (0,), NOW - 12000,
                     NOW - 11990, NOW - 11900, 1, "exit 1"),
        ]
        self.allocation_list = [
            AllocationView(1, "task", "ana", "atlas", 0, NOW_S - 3990, task_id=12),
            AllocationView(3, "task", "ana", "atlas", 1, NOW_S - 3990, task_id=12),
            AllocationView(2, "reservation", "bob", "atlas", 2, NOW_S - 600,
                           expires_at=NOW_S + 3000, note="benchmarking", idle_since=NOW_S - 300),
        ]
        self.usage_list = [UserUsageView("ana", 30.0, 24.0, 0.8, 12, 1),
                           UserUsageView("bob", 10.0, 1.0, 0.1, 2, 0)]
        self.candidate_list = [
            CandidateView("10.0.0.77:22", "gpu-new-01", "10.0.0.77", 22, "_fleet._tcp",
                          gpu_summary="4× L40S", last_seen=NOW - 5),
            CandidateView("10.0.0.78:22", "printer", "10.0.0.78", 22, "_ssh._tcp",
                          last_seen=NOW - 40),
        ]

    def push(self, snapshot: FleetSnapshot) -> None:
        """Publish a new snapshot to the app's watch()."""
        self.snapshot = snapshot
        self.queue.put_nowait(snapshot)

    async def watch(self) -> AsyncIterator[FleetSnapshot]:
        while True:
            yield await self.queue.get()

    async def gpu_history(self, host: str, since: float, until: float) -> list[GpuHistory]:
        self.calls.append(("history", host, until - since))
        found = self.snapshot.host(host)
        gpus = found.gpus if found else ()
        return [GpuHistory(host, g.index, tuple(
            HistoryPoint(since + step * 30, float((step * 7 + g.index * 13) % 100),
                         float(step * GIB), 40.0 + step % 30, 100.0 + step * 5)
            for step in range(30))) for g in gpus]

    async def tasks(self) -> list[TaskView]:
        return list(self.task_list)

    async def log_tail(self, task_id: int) -> AsyncIterator[str]:
        self.calls.append(("log", task_id))
        for line in self.log_lines:
            yield f"[task {task_id}] {line}"

    async def cancel(self, task_id: int) -> None:
        self.calls.append(("cancel", task_id))
        self.task_list = [replace(t, state="cancelled", ended_at=NOW) if t.task_id == task_id
                          else t for t in self.task_list]

    async def events(self, limit: int = 500, *, host: str | None = None) -> list[EventView]:
        shown = [event for event in self.event_list() if host is None or event.host == host]
        return shown[:limit]

    def event_list(self) -> list[EventView]:
        """Every event the fake holds, newest first."""
        return [
            EventView(5, NOW - 30, "warning", "gpu_hot", "boreas GPU 3 at 88°C (ceiling 85°C)",
                      "boreas", 3),
            EventView(4, NOW - 300, "error", "host_down", "draco: no answer within 10s",
                      "draco"),
            EventView(3, NOW - 3990, "info", "task_started", "task 12 train-llm on atlas",
                      "atlas", task_id=12),
            EventView(2, NOW - 7000, "info", "task_finished", "task 11 eval-sweep exit 0",
                      "boreas", task_id=11),
            EventView(1, NOW - 9999, "info", "host_drained", "eridanus drained: maintenance",
                      "eridanus"),
        ]

    async def allocations(self) -> list[AllocationView]:
        return list(self.allocation_list)

    async def usage(self, since: float) -> list[UserUsageView]:
        self.calls.append(("usage", since))
        return list(self.usage_list)

    async def reserve(self, host: str, gpu_indices: Sequence[int], duration_s: float | None,
                      note: str | None) -> list[AllocationView]:
        self.calls.append(("reserve", host, tuple(gpu_indices)))
        taken = {(a.host, a.gpu_index) for a in self.allocation_list}
        if any((host, i) in taken for i in gpu_indices):
            raise AllocationConflict(f"{host} GPU {list(gpu_indices)} already allocated")
        made = [AllocationView(100 + i, "reservation", "you", host, i, NOW_S,
                               expires_at=NOW_S + int(duration_s or 0), note=note)
                for i in gpu_indices]
        self.allocation_list += made
        return made

    async def release(self, allocation_id: int) -> None:
        self.calls.append(("release", allocation_id))
        self.allocation_list = [a for a in self.allocation_list
                                if a.allocation_id != allocation_id]

    async def drain(self, host: str, gpu_index: int | None, reason: str) -> None:
        self.calls.append(("drain", host, gpu_index))
        self._set_drained(host, gpu_index, True)

    async def undrain(self, host: str, gpu_index: int | None) -> None:
        self.calls.append(("undrain", host, gpu_index))
        self._set_drained(host, gpu_index, False)

    def _set_drained(self, name: str, gpu_index: int | None, drained: bool) -> None:
        hosts = []
        for item in self.snapshot.hosts:
            if item.spec.name == name and gpu_index is None:
                item = msgspec.structs.replace(item, drained=drained)
            elif item.spec.name == name:
                gpus = tuple(msgspec.structs.replace(g, drained=drained)
                             if g.index == gpu_index else g for g in item.gpus)
                item = msgspec.structs.replace(item, gpus=gpus)
            hosts.append(item)
        self.push(replace(self.snapshot, hosts=tuple(hosts), changed=frozenset({name})))

    async def candidates(self) -> list[CandidateView]:
        return list(self.candidate_list)

    async def host_key(self, candidate_key: str) -> HostKeyFingerprint:
        self.calls.append(("host_key", candidate_key))
        return HostKeyFingerprint("ssh-ed25519", "SHA256:q0b3+fakeFingerprintForTests0123456789a")

    async def adopt(self, candidate_key: str, fingerprint: HostKeyFingerprint) -> str:
        self.calls.append(("adopt", candidate_key, fingerprint.sha256))
        self.candidate_list = [replace(c, state="adopted") if c.key == candidate_key else c
                               for c in self.candidate_list]
        return next(c.name for c in self.candidate_list if c.key == candidate_key)

    async def scan(self) -> list[CandidateView]:
        self.calls.append(("scan",))
        self.candidate_list = self.candidate_list + self.scan_finds
        return list(self.candidate_list)

    async def discovery_scope(self) -> DiscoveryScope:
        return DiscoveryScope(("_ssh._tcp", "_fleet._tcp"), ("veth-lab",))

    async def preview(self, request: DispatchRequest) -> PlacementPreview:
        self.calls.append(("preview", request.script, request.gpus))
        excluded = ("draco: host is unreachable (no answer within 10s)",
                    "eridanus: host drained: maintenance",
                    "boreas:1: in use by 1 process not started by fleet")
        if request.gpus > 4:
            return PlacementPreview(False, None, (), (), (
                f"atlas: only 5 eligible GPUs on this host, {request.gpus} needed on one host",
                "cygnus: only 2 eligible GPUs on this host", *excluded))
        return PlacementPreview(True, "cygnus", tuple(range(request.gpus)), (
            "* cygnus:0  score 3.15  NVIDIA GeForce RTX 4090",
            "  atlas:3  score 2.71  NVIDIA H100 80GB HBM3"), excluded)

    async def dispatch(self, request: DispatchRequest) -> TaskView:
        self.calls.append(("dispatch", request.script, request.gpus, request.args))
        if self.fail_dispatch:
            raise DispatchError("cygnus: upload failed: disk full")
        task = TaskView(self.next_task_id, request.name or request.script.rsplit("/", 1)[-1],
                        "running", "you", "cygnus", tuple(range(request.gpus)), NOW, NOW)
        self.next_task_id += 1
        self.task_list.insert(0, task)
        return task

    def suggested_scripts(self) -> list[str]:
        return ["examples/train.py", "examples/burn.sh"]
