"""Terminal escape sequences in host names, GPU names, task names/output, events and mDNS
candidates never reach the terminal through the TUI: no ESC/BEL in any screen's rendering."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

from fleet.snapshot import FleetSnapshot
from tests.tui.conftest import settle
from tests.tui.fake_service import NOW, FakeService, gpu, host
from tui.app import FleetApp
from tui.service import CandidateView, EventView, TaskView

CLEAR = "\x1b[2J"
TITLE = "\x1b]0;pwned\x07"
CSI_C1 = "\x9b31m"
EVIL = f"{CLEAR}{TITLE}{CSI_C1}evil"


class HostileService(FakeService):
    """FakeService whose every outside-sourced string carries terminal escapes."""

    async def events(self, limit: int = 500) -> list[EventView]:
        return [EventView(1, NOW - 5, "error", "host_down", f"{EVIL} down", f"h{EVIL}")]

    async def log_tail(self, task_id: int) -> AsyncIterator[str]:
        yield f"output {EVIL}"


def hostile_snapshot() -> FleetSnapshot:
    name = f"h{EVIL}"
    gpus = [gpu(name, i, f"NVIDIA {EVIL}", 80, 10, 1, 40, 100) for i in range(2)]
    plain = [gpu("plain", 0, "L4", 24, 0, 0, 30, 20)]
    hosts = (host(name, gpus, reason=EVIL), host("plain", plain))
    return FleetSnapshot(taken_at=NOW, hosts=hosts, changed=frozenset(h.spec.name for h in hosts))


def hostile_service() -> HostileService:
    service = HostileService(snapshot=hostile_snapshot())
    service.task_list = [TaskView(7, f"task{EVIL}", "failed", f"own{EVIL}", f"h{EVIL}", (0,),
                                  NOW - 60, NOW - 50, NOW - 10, 1, f"err {EVIL}")]
    service.candidate_list = [CandidateView("10.0.0.9:22", f"cand{EVIL}", "10.0.0.9", 22,
                                            "_fleet._tcp", gpu_summary=f"4× {EVIL}",
                                            last_seen=NOW - 1)]
    service.allocation_list = [replace(a, owner=f"o{EVIL}") for a in service.allocation_list]
    return service


def assert_no_escapes(app: FleetApp, where: str) -> None:
    screen_text = app.export_screenshot()
    for control in ("\x1b", "\x07", "\x9b"):
        assert control not in screen_text, f"{where}: {control!r} reached the screen"


async def test_every_screen_neutralises_escapes() -> None:
    app = FleetApp(hostile_service(), clock=lambda: NOW)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        assert_no_escapes(app, "overview")
        assert "h?[2J" in app.export_screenshot()  # the hostile rows are shown, made harmless
        for key in ("t", "a", "e", "v"):
            await pilot.press(key)
            await settle(pilot)
            assert_no_escapes(app, f"screen {key}")
        await pilot.press("t")
        await settle(pilot)
        await pilot.press("enter")  # follow the task's log
        await settle(pilot)
        assert_no_escapes(app, "task log")
