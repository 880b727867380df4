"""Event hooks: run configured commands with an event as JSON on stdin, never blocking the caller.

A hook command given as a list is executed directly (no shell); one given as a string is run by
`/bin/sh -c STRING`. Each run gets the event as one JSON document on stdin and the variables
FLEET_EVENT_KIND and FLEET_EVENT_SEVERITY; it runs in its own process group, which is killed
when it passes its timeout. Runs that fail (non-zero exit, timeout, command not found) become
"hook_failed" events handed to `on_failure`; hooks never run for "hook_failed" events (no loops).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from db.types import SEVERITIES
from fleet.health.webhook_settings import Webhook

log = logging.getLogger(__name__)

HOOK_FAILED_KIND = "hook_failed"
STDERR_TAIL_BYTES = 2000
KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class HookCommand:
    """One hook: what to run and which events it wants.

    `kinds` are event kinds or globs ("gpu_*"); empty means every kind. Only events at least
    as severe as `min_severity` run it. `timeout_s` None uses the settings' default.
    """

    command: tuple[str, ...] | str
    kinds: tuple[str, ...] = ()
    min_severity: str = "info"
    timeout_s: float | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.command, str) and not self.command.strip():
            raise ValueError("hook command is empty")
        if not isinstance(self.command, str) and not self.command:
            raise ValueError("hook command is empty")
        if self.min_severity not in SEVERITIES:
            raise ValueError(
                f"hook min_severity {self.min_severity!r} is not one of {', '.join(SEVERITIES)}"
            )
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"hook timeout_s must be positive, not {self.timeout_s:g}")

    @property
    def label(self) -> str:
        """The name to show in messages: `name`, else the command (shortened)."""
        if self.name:
            return self.name
        text = self.command if isinstance(self.command, str) else " ".join(self.command)
        return text if len(text) <= 60 else text[:57] + "..."

    def wants(self, event: Mapping[str, object]) -> bool:
        """True when `event` passes this hook's kind and severity filters."""
        kind = str(event.get("kind", ""))
        # Kinds match case-insensitively, as `fleet events --kind` does (db.event_queries).
        if self.kinds and not any(fnmatch.fnmatchcase(kind.lower(), pattern.lower())
                                  for pattern in self.kinds):
            return False
        severity = str(event.get("severity", "info"))
        rank = SEVERITIES.index(severity) if severity in SEVERITIES else 0
        return rank >= SEVERITIES.index(self.min_severity)


@dataclass(frozen=True)
class HookSettings:
    """The `hooks:` settings: commands, webhooks, default timeout, concurrency and queue bound.

    max_concurrent: hook commands at once, and (separately) webhook deliveries at once
    queue_size: waiting hook runs, and (separately) waiting deliveries; beyond it they are dropped
    webhooks: URLs that get events as HTTP POSTs (fleet.health.webhook_settings.Webhook)
    webhook_poll_s: how often the monitor reads newly stored events for the webhooks
    """

    commands: tuple[HookCommand, ...] = ()
    timeout_s: float = 10.0
    max_concurrent: int = 4
    queue_size: int = 256
    close_timeout_s: float = 5.0
    webhooks: tuple[Webhook, ...] = ()
    webhook_poll_s: float = 2.0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"hooks timeout_s must be positive, not {self.timeout_s:g}")
        if self.max_concurrent < 1:
            raise ValueError(f"hooks max_concurrent must be at least 1, not {self.max_concurrent}")
        if self.queue_size < 1:
            raise ValueError(f"hooks queue_size must be at least 1, not {self.queue_size}")
        if not 0.01 <= self.webhook_poll_s <= 3600:
            raise ValueError("hooks webhook_poll_s must be between 0.01 and 3600, not "
                             f"{self.webhook_poll_s:g}")


FailureCallback = Callable[[dict[str, object]], None]


@dataclass
class HookStats:
    """Counters of a HookRunner since it started."""

    submitted: int = 0
    started: int = 0
    succeeded: int = 0
    failed: int = 0
    dropped: int = 0
    running: int = 0
    failures: list[dict[str, object]] = field(default_factory=list)


class HookRunner:
    """Runs hook commands for events on the running asyncio loop, at most `max_concurrent` at once.

    Create it inside a running loop; call `submit` from that loop's thread; `await close()`.
    """

    def __init__(self, settings: HookSettings, on_failure: FailureCallback | None = None) -> None:
        self.settings = settings
        self.on_failure = on_failure
        self.stats = HookStats()
        self._queue: asyncio.Queue[tuple[HookCommand, dict[str, object]]] = asyncio.Queue(
            settings.queue_size
        )
        self._closing = False
        self._process_groups: set[int] = set()
        self._idle = asyncio.Event()  # set while no hook process is running
        self._idle.set()
        self._workers = [
            asyncio.get_running_loop().create_task(self._work(), name=f"fleet-hook-{number}")
            for number in range(settings.max_concurrent if settings.commands else 0)
        ]

    def submit(self, event: Mapping[str, object]) -> int:
        """Queue every matching hook for `event`; returns how many were queued (never blocks).

        When the queue is full the run is dropped and counted in `stats.dropped`.
        """
        if self._closing or event.get("kind") == HOOK_FAILED_KIND:
            return 0
        queued = 0
        payload = dict(event)
        for hook in self.settings.commands:
            if not hook.wants(payload):
                continue
            self.stats.submitted += 1
            try:
                self._queue.put_nowait((hook, payload))
            except asyncio.QueueFull:
                self.stats.dropped += 1
                log.warning("hook queue full: dropped %s for event %s", hook.label,
                            payload.get("kind"))
                continue
            queued += 1
        return queued

    async def close(self, timeout_s: float | None = None) -> None:
        """Stop taking events, let queued and running hooks finish within the timeout, then kill.

        Hooks still queued at the deadline are dropped (counted); running ones are killed.
        """
        self._closing = True
        deadline = self.settings.close_timeout_s if timeout_s is None else timeout_s
        if self._workers:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(deadline):
                    await self._queue.join()
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
            self.stats.dropped += 1
        for group in list(self._process_groups):
            _kill_group(group)
        # Let the workers reap what was killed (recorded as failures) before stopping them.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(KILL_WAIT_S):
                await self._idle.wait()
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()

    async def _work(self) -> None:
        while True:
            hook, event = await self._queue.get()
            try:
                await self._run(hook, event)
            finally:
                self._queue.task_done()

    async def _run(self, hook: HookCommand, event: dict[str, object]) -> None:
        timeout_s = hook.timeout_s or self.settings.timeout_s
        argv = ["/bin/sh", "-c", hook.command] if isinstance(hook.command, str) \
            else list(hook.command)
        env = dict(os.environ)
        env["FLEET_EVENT_KIND"] = str(event.get("kind", ""))
        env["FLEET_EVENT_SEVERITY"] = str(event.get("severity", ""))
        started = time.monotonic()
        self.stats.started += 1
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True,
            )
        except OSError as exc:
            self._failed(hook, event, f"cannot start: {exc.strerror or exc}", None, "")
            return
        self._process_groups.add(process.pid)
        self.stats.running += 1
        self._idle.clear()
        try:
            payload = json.dumps(event, default=str).encode() + b"\n"
            try:
                async with asyncio.timeout(timeout_s):
                    _, stderr = await process.communicate(payload)
            except TimeoutError:
                await _kill_and_reap(process)
                self._failed(hook, event, f"timed out after {timeout_s:g}s (killed)", None, "")
                return
            except asyncio.CancelledError:
                await _kill_and_reap(process)
                raise
        finally:
            self.stats.running -= 1
            self._process_groups.discard(process.pid)
            if not self.stats.running:
                self._idle.set()
        if process.returncode != 0:
            tail = stderr[-STDERR_TAIL_BYTES:].decode(errors="replace").strip()
            self._failed(hook, event, f"exited with status {process.returncode}",
                         process.returncode, tail)
            return
        self.stats.succeeded += 1
        log.debug("hook %s ran for %s in %.3fs", hook.label, event.get("kind"),
                  time.monotonic() - started)

    def _failed(self, hook: HookCommand, event: Mapping[str, object], why: str,
                exit_code: int | None, stderr_tail: str) -> None:
        self.stats.failed += 1
        message = f"hook {hook.label} failed for event {event.get('kind')}: {why}"
        if stderr_tail:
            message += f": {stderr_tail.splitlines()[-1]}"
        failure: dict[str, object] = {
            "ts": time.time(),
            "kind": HOOK_FAILED_KIND,
            "severity": "warning",
            "host": event.get("host"),
            "gpu_index": event.get("gpu_index"),
            "message": message,
            "data": {"hook": hook.label, "reason": why, "exit_code": exit_code,
                     "stderr": stderr_tail, "event_kind": event.get("kind"),
                     "event_id": event.get("id")},
        }
        log.warning("%s", message)
        self.stats.failures.append(failure)
        del self.stats.failures[:-100]
        if self.on_failure is not None:
            self.on_failure(failure)


async def _kill_and_reap(process: asyncio.subprocess.Process) -> None:
    """Kill the hook's process group and wait (bounded) for the hook process to exit."""
    _kill_group(process.pid)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(KILL_WAIT_S):
            await process.wait()


def _kill_group(process_group: int) -> None:
    """SIGKILL a hook's whole process group (it may have children); gone already is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process_group, signal.SIGKILL)
