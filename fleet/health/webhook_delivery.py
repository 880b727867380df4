"""Webhook delivery: POST events off the caller's path, retried with backoff, within a deadline.

`submit` never blocks: it puts (webhook, event) pairs on a bounded queue (full: dropped and
counted), and `max_concurrent` workers POST them with aiohttp. An answer of 5xx or 429, a
connection error or a silent server is retried after an exponentially growing, jittered wait
(429's `Retry-After` is honoured), until the webhook's `deadline_s` for that event runs out; any
other answer (4xx, 3xx) fails at once. A delivery that fails becomes a "webhook_failed" event
handed to `on_failure`; URLs in it, in logs and in error texts are redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fleet.health.secret_url import scrub
from fleet.health.webhook_formats import webhook_body
from fleet.health.webhook_settings import WEBHOOK_FAILED_KIND, Webhook

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

FailureCallback = Callable[[dict[str, object]], None]
USER_AGENT = "fleet-webhook/1"


@dataclass(frozen=True)
class RetryPolicy:
    """Waits between attempts (doubling from `first_wait_s` up to `max_wait_s`, each drawn at
    random from its upper half) and the bound of one attempt."""

    first_wait_s: float = 0.5
    max_wait_s: float = 15.0
    attempt_timeout_s: float = 10.0
    # No attempt starts with less than this left before the deadline: one that short fails by
    # timing out, and would hide the reason the earlier attempts failed.
    min_attempt_s: float = 0.1


@dataclass(frozen=True)
class _Attempt:
    """What one POST got: delivered, or why not and whether another attempt may help."""

    delivered: bool
    status: int | None = None
    reason: str = ""
    retry: bool = False
    retry_after_s: float | None = None
    timed_out: bool = False


@dataclass
class WebhookStats:
    """Counters of a WebhookRunner since it started."""

    submitted: int = 0
    delivered: int = 0
    failed: int = 0
    dropped: int = 0
    attempts: int = 0
    failures: list[dict[str, object]] = field(default_factory=list)


class WebhookRunner:
    """Delivers events to `webhooks` on the running loop; call `submit` from its thread and
    `await close()` at the end."""

    def __init__(self, webhooks: Sequence[Webhook], *, max_concurrent: int = 4,
                 queue_size: int = 256, on_failure: FailureCallback | None = None,
                 policy: RetryPolicy | None = None, close_timeout_s: float = 5.0) -> None:
        self.webhooks = tuple(webhooks)
        self.on_failure = on_failure
        self.policy = policy or RetryPolicy()
        self.close_timeout_s = close_timeout_s
        self.stats = WebhookStats()
        self._queue: asyncio.Queue[tuple[Webhook, dict[str, object]]] = asyncio.Queue(queue_size)
        self._closing = False
        self._session: aiohttp.ClientSession | None = None
        self._workers = [
            asyncio.get_running_loop().create_task(self._work(), name=f"fleet-webhook-{number}")
            for number in range(max_concurrent if self.webhooks else 0)
        ]

    def submit(self, event: Mapping[str, object]) -> int:
        """Queue `event` for every webhook that wants it; returns how many (never blocks)."""
        if self._closing:
            return 0
        queued = 0
        payload = dict(event)
        for webhook in self.webhooks:
            if not webhook.wants(payload):
                continue
            self.stats.submitted += 1
            try:
                self._queue.put_nowait((webhook, payload))
            except asyncio.QueueFull:
                self.stats.dropped += 1
                log.warning("webhook queue full: dropped %s for event %s", webhook.label,
                            payload.get("kind"))
                continue
            queued += 1
        return queued

    async def wait_idle(self) -> None:
        """Until every queued delivery has succeeded or failed (bound it with a timeout)."""
        await self._queue.join()

    async def close(self, timeout_s: float | None = None) -> None:
        """Stop taking events, let queued deliveries finish within the timeout, then stop.

        Deliveries still queued at the deadline are dropped (counted); running ones are
        cancelled.
        """
        self._closing = True
        deadline = self.close_timeout_s if timeout_s is None else timeout_s
        if self._workers:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(deadline):
                    await self._queue.join()
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
            self.stats.dropped += 1
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _work(self) -> None:
        while True:
            webhook, event = await self._queue.get()
            try:
                await self._deliver(webhook, event)
            except Exception as exc:  # a bug here must not stop this worker for good
                log.exception("webhook %s: delivery of event %s broke", webhook.label,
                              event.get("kind"))
                self._failed(webhook, event, _Attempt(
                    False, reason=f"internal error: {scrub(repr(exc), webhook.url)}"), 1, "")
            finally:
                self._queue.task_done()

    async def _deliver(self, webhook: Webhook, event: dict[str, object]) -> None:
        body = webhook_body(event, webhook.format)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + webhook.deadline_s
        wait_s = self.policy.first_wait_s
        attempts = 0
        telling: _Attempt | None = None  # the last outcome not cut short by the deadline
        while True:
            attempts += 1
            self.stats.attempts += 1
            left_s = max(deadline - loop.time(), 0.001)
            timeout_s = min(self.policy.attempt_timeout_s, left_s)
            outcome = await self._post(webhook, body, timeout_s)
            if outcome.delivered:
                self.stats.delivered += 1
                log.debug("webhook %s got event %s (attempt %d)", webhook.label,
                          event.get("kind"), attempts)
                return
            if not outcome.retry:
                self._failed(webhook, event, outcome, attempts, "")
                return
            cut_short = outcome.timed_out and timeout_s < self.policy.attempt_timeout_s
            if telling is None or not cut_short:
                telling = outcome
            pause_s = (outcome.retry_after_s if outcome.retry_after_s is not None
                       else random.uniform(wait_s / 2, wait_s))
            if loop.time() + pause_s + self.policy.min_attempt_s > deadline:
                last = " (the last cut off by the deadline)" if telling is not outcome else ""
                self._failed(webhook, event, telling, attempts,
                             f"{last}; gave up at its {webhook.deadline_s:g}s deadline")
                return
            await asyncio.sleep(pause_s)
            wait_s = min(wait_s * 2, self.policy.max_wait_s)

    async def _post(self, webhook: Webhook, body: bytes, timeout_s: float) -> _Attempt:
        import aiohttp

        if self._session is None:
            # trust_env: HTTPS_PROXY and NO_PROXY apply, as a lab behind a proxy needs.
            self._session = aiohttp.ClientSession(trust_env=True)
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        try:
            async with asyncio.timeout(timeout_s):
                async with self._session.post(webhook.url, data=body, headers=headers,
                                              allow_redirects=False) as response:
                    status = response.status
                    retry_after = _retry_after_s(response.headers.get("Retry-After"))
        except TimeoutError:
            return _Attempt(False, reason=f"no answer within {timeout_s:.3g}s", retry=True,
                            timed_out=True)
        except aiohttp.InvalidURL as exc:
            return _Attempt(False, reason=scrub(f"invalid URL: {exc}", webhook.url))
        except (aiohttp.ClientError, OSError) as exc:
            reason = scrub(str(exc) or type(exc).__name__, webhook.url)
            return _Attempt(False, reason=f"cannot connect: {reason}", retry=True)
        if 200 <= status < 300:
            return _Attempt(True, status=status)
        retry = status == 429 or status >= 500
        return _Attempt(False, status=status, reason=f"HTTP {status}", retry=retry,
                        retry_after_s=retry_after if retry else None)

    def _failed(self, webhook: Webhook, event: Mapping[str, object], outcome: _Attempt,
                attempts: int, note: str) -> None:
        self.stats.failed += 1
        tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
        reason = f"{outcome.reason} after {tries}{note}"
        message = f"webhook {webhook.label} failed for event {event.get('kind')}: {reason}"
        failure: dict[str, object] = {
            "ts": time.time(),
            "kind": WEBHOOK_FAILED_KIND,
            "severity": "warning",
            "host": event.get("host"),
            "gpu_index": event.get("gpu_index"),
            "message": message,
            "data": {"webhook": webhook.label, "webhook_id": webhook.identity,
                     "url": webhook.shown_url, "reason": reason,
                     "status": outcome.status, "attempts": attempts,
                     "event_kind": event.get("kind"), "event_id": event.get("id"),
                     "task_id": event.get("task_id")},
        }
        log.warning("%s", message)
        self.stats.failures.append(failure)
        del self.stats.failures[:-100]
        if self.on_failure is not None:
            self.on_failure(failure)


def _retry_after_s(value: str | None) -> float | None:
    """Seconds from a `Retry-After: N` header (an HTTP date is ignored: backoff applies)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
