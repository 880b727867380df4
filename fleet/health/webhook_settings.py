"""One built-in webhook of the `hooks.webhooks:` settings: its URL, event filter and format."""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from db.types import SEVERITIES
from fleet.health.secret_url import redact_secret_url

WEBHOOK_FORMATS = ("json", "slack")
WEBHOOK_FAILED_KIND = "webhook_failed"
# Event kinds are words joined by "_"; a pattern adds the globs `*`, `?` and `[...]` classes.
KIND_PATTERN = re.compile(r"(?:[A-Za-z0-9_%*?]|\[!?[A-Za-z0-9_%-]+\])+")


@dataclass(frozen=True)
class Webhook:
    """A URL that gets an HTTP POST of each event passing its filters.

    `kinds` are event kinds or globs ("task_*"), matched case-insensitively as hook commands'
    `kinds` are; empty means every kind. `format` is "json" (the event document) or "slack"
    (Slack-compatible `{"text", "blocks"}`, which Mattermost and Rocket.Chat accept too).
    `deadline_s` bounds one event's delivery, every retry included. `only_notified` keeps
    only the events of tasks dispatched with `--notify` (their `data.notify` is true).
    """

    # `fleet config show` prints the URL through `shown_as`: its secrets hidden.
    url: str = field(metadata={"doc": "where events are POSTed (http:// or https://)",
                               "shown_as": redact_secret_url})
    kinds: tuple[str, ...] = ()
    min_severity: str = "info"
    format: str = "json"
    name: str | None = None
    deadline_s: float = 60.0
    only_notified: bool = False

    def __post_init__(self) -> None:
        try:
            parts = urlsplit(self.url)
            parts.port  # noqa: B018 -- a malformed port raises ValueError here
        except ValueError as exc:
            raise ValueError(f"webhook url {redact_secret_url(self.url)!r} is not a valid URL: "
                             f"{exc}") from None
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ValueError(f"webhook url {redact_secret_url(self.url)!r} must be an http:// "
                             "or https:// URL with a host")
        if self.format not in WEBHOOK_FORMATS:
            raise ValueError(f"webhook format {self.format!r} is not one of "
                             f"{', '.join(WEBHOOK_FORMATS)}")
        if self.min_severity not in SEVERITIES:
            raise ValueError(f"webhook min_severity {self.min_severity!r} is not one of "
                             f"{', '.join(SEVERITIES)}")
        for pattern in self.kinds:
            if not KIND_PATTERN.fullmatch(pattern):
                raise ValueError(f"webhook kind {pattern!r} is not an event kind or a glob of "
                                 "one (letters, digits, _, *, ? and [...])")
        if self.deadline_s <= 0:
            raise ValueError(f"webhook deadline_s must be positive, not {self.deadline_s:g}")

    @property
    def shown_url(self) -> str:
        """The URL with its secrets hidden, for logs, events and `fleet config show`."""
        return redact_secret_url(self.url)

    @property
    def identity(self) -> str:
        """A short digest of the URL: tells webhooks apart when their shown URLs are alike,
        without showing it."""
        return hashlib.sha256(self.url.encode()).hexdigest()[:12]

    @property
    def label(self) -> str:
        """The name to show in messages: `name`, else the redacted URL."""
        return self.name or self.shown_url

    def wants(self, event: Mapping[str, object]) -> bool:
        """True when `event` passes the kind and severity filters and is not this webhook's
        own failure (a failing webhook is never told that it failed: no loops)."""
        kind = str(event.get("kind", "")).lower()
        data = event.get("data")
        details = data if isinstance(data, Mapping) else {}
        # Nor is a failure to deliver a failure passed on: two failing webhooks would otherwise
        # tell each other forever.
        if kind == WEBHOOK_FAILED_KIND and (details.get("webhook_id") == self.identity
                                            or details.get("event_kind") == kind):
            return False
        if self.only_notified and details.get("notify") is not True:
            return False
        if self.kinds and not any(fnmatch.fnmatchcase(kind, pattern.lower())
                                  for pattern in self.kinds):
            return False
        severity = str(event.get("severity", "info"))
        rank = SEVERITIES.index(severity) if severity in SEVERITIES else 0
        return rank >= SEVERITIES.index(self.min_severity)
