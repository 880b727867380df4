"""The monitoring loop of a `connection: local` host: NVML read in-process by a worker thread."""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
import time
from typing import Any

from fleet.errors import ProbeError
from fleet.model import HostSpec
from fleet.monitor.settings import MonitorSettings
from fleet.monitor.stream import HostSink, StreamStats
from fleet.probe.parse import report_from_dict

log = logging.getLogger("fleet.monitor.local")


def _remote_module() -> Any:
    """fleet.probe.remote (plain Python 3.6, outside mypy's view): the probe's own readers."""
    return importlib.import_module("fleet.probe.remote")


class LocalStream:
    """Reads the controller's own GPUs every interval with one NVML session kept open.

    The thread only reads; every reading is handed to the event loop, which owns all state.
    """

    def __init__(self, spec: HostSpec, settings: MonitorSettings, sink: HostSink) -> None:
        self.spec = spec
        self.settings = settings
        self.sink = sink
        self.stats = StreamStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    async def run(self) -> None:
        """Run the reading thread until stop(); returns when it has finished."""
        loop = asyncio.get_running_loop()
        finished = loop.create_future()

        def deliver(reading: dict[str, Any] | None, error: str | None) -> None:
            if error is not None:
                self.stats.failures += 1
                self.sink.on_failure(self.spec, "probe_error", error)
                return
            try:
                report = report_from_dict(reading, self.spec.name)
            except ProbeError as exc:
                self.stats.garbage_lines += 1
                log.warning("%s: skipped a local reading: %s", self.spec.name, exc.detail)
                return
            self.stats.reports += 1
            self.sink.on_report(self.spec, report)

        def done() -> None:
            if not finished.done():
                finished.set_result(None)

        self.stats.probes_started += 1
        self._thread = threading.Thread(
            target=self._read_loop,
            args=(loop, deliver, done),
            name=f"fleet-local-probe-{self.spec.name}",
            daemon=True,
        )
        self._thread.start()
        await finished

    async def stop(self) -> None:
        """Ask the thread to finish after its current reading."""
        self._stop.set()

    async def kill_remote_probe(self) -> None:
        """Nothing runs remotely for a local host; the thread ends on stop()."""
        self._stop.set()

    def _read_loop(self, loop: asyncio.AbstractEventLoop, deliver: Any, done: Any) -> None:
        remote = _remote_module()
        session = remote.NvmlSession().start()
        cpu_before = remote.cpu_mark()
        next_due = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    reading, cpu_before = remote.read_sample(
                        session, self.settings.tasks_dir, cpu_before, wait=self._stop.wait
                    )
                    outcome: tuple[dict[str, Any] | None, str | None] = (reading, None)
                except (OSError, ValueError, RuntimeError) as exc:
                    outcome = (None, f"local probe failed: {type(exc).__name__}: {exc}")
                if loop.is_closed():
                    return
                loop.call_soon_threadsafe(deliver, *outcome)
                next_due += self.settings.interval
                now = time.monotonic()
                if next_due < now:  # a slow reading: skip missed ticks rather than burst
                    next_due = now
                self._stop.wait(next_due - now)
        finally:
            session.stop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(done)
