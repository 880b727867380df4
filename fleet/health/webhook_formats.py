"""The bodies a webhook POSTs: the plain event document, or Slack-compatible JSON."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

SEVERITY_MARKS = {"info": ":information_source:", "warning": ":warning:",
                  "error": ":red_circle:", "critical": ":rotating_light:"}
# Slack refuses a section text over 3,000 characters; messages are cut well below that.
MAX_SLACK_TEXT = 2900


def webhook_body(event: Mapping[str, object], format_name: str) -> bytes:
    """The UTF-8 JSON body for `event` in `format_name` ("json" or "slack")."""
    document = slack_message(event) if format_name == "slack" else dict(event)
    return json.dumps(document, default=str, sort_keys=True).encode()


def slack_message(event: Mapping[str, object]) -> dict[str, object]:
    """`{"text", "blocks"}` as Slack's incoming webhooks take it; `text` alone reads well in
    notifications and in services that ignore blocks."""
    severity = str(event.get("severity", "info"))
    kind = str(event.get("kind", "event"))
    message = str(event.get("message") or kind)
    where = _where(event)
    text = f"[{severity.upper()}] {kind}{' on ' + where if where else ''}: {message}"
    context = [f"*{_escape(kind)}*", f"severity {_escape(severity)}"]
    if where:
        context.append(_escape(where))
    task_id = event.get("task_id")
    if task_id is not None:
        context.append(f"task {_escape(str(task_id))}")
    ts = event.get("ts")
    if isinstance(ts, int | float):
        context.append(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts)))
    mark = SEVERITY_MARKS.get(severity, "")
    return {
        "text": _cut(_escape(text)),
        "blocks": [
            {"type": "section",
             "text": {"type": "mrkdwn", "text": _cut(f"{mark} {_escape(message)}".strip())}},
            {"type": "context",
             "elements": [{"type": "mrkdwn", "text": " · ".join(context)}]},
        ],
    }


def _where(event: Mapping[str, object]) -> str:
    host = event.get("host")
    if not host:
        return ""
    gpu_index = event.get("gpu_index")
    return f"{host} GPU {gpu_index}" if gpu_index is not None else str(host)


def _escape(text: str) -> str:
    """Slack's three control characters in mrkdwn, escaped as its docs require."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SLACK_TEXT else text[:MAX_SLACK_TEXT - 1] + "…"
