"""Listing events with filters (time, severity, host, kind glob) and the GPU each concerns.

Plain SQL through a db.sql reader, so `fleet events` on an SQLite file loads no SQLAlchemy.
"""

from __future__ import annotations

import json
from typing import Any

from db.rows import EventView
from db.sql import SqlReader, in_list
from db.types import SEVERITIES, Severity

_EVENT_SELECT = """
SELECT events.id, events.ts, events.kind, events.severity, events.message, hosts.name,
       gpus.idx, gpus.uuid, events.task_id, events.data_json
FROM events LEFT OUTER JOIN hosts ON hosts.id = events.host_id
LEFT OUTER JOIN gpus ON gpus.id = events.gpu_id
"""


def _like_pattern(glob: str) -> str:
    """A shell-style glob ("gpu_*") as a LIKE pattern with '\\' escaping % and _."""
    escaped = glob.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")


def find_events(
    reader: SqlReader,
    *,
    since: int | None = None,
    until: int | None = None,
    severity: Severity | None = None,
    host: str | None = None,
    kind: str | None = None,
    limit: int | None = 100,
) -> list[EventView]:
    """The newest `limit` events matching every given filter, oldest first.

    since/until are epoch seconds (since <= ts < until); `severity` keeps that level and worse;
    `host` is a host name; `kind` an event kind or a glob ("gpu_*", `*` any run, `?` one
    character), matched case-insensitively on every backend (kinds are stored lower-case;
    SQLite's LIKE ignores ASCII case and PostgreSQL's does not, so both sides are lowered).
    Raises ValueError for an unknown severity or a non-positive limit.
    """
    if severity is not None and severity not in SEVERITIES:
        raise ValueError(f"unknown severity {severity!r}; use one of {', '.join(SEVERITIES)}")
    if limit is not None and limit <= 0:
        raise ValueError(f"limit must be positive, not {limit}")
    terms: list[str] = []
    parameters: dict[str, Any] = {"since": since, "until": until, "host": host, "limit": limit}
    if since is not None:
        terms.append("events.ts >= :since")
    if until is not None:
        terms.append("events.ts < :until")
    if severity is not None:
        placeholders, bound = in_list("severity", SEVERITIES[SEVERITIES.index(severity):])
        terms.append(f"events.severity IN ({placeholders})")
        parameters.update(bound)
    if host is not None:
        terms.append("hosts.name = :host")
    if kind is not None:
        if "*" in kind or "?" in kind:
            terms.append("lower(events.kind) LIKE :kind ESCAPE '\\'")
            parameters["kind"] = _like_pattern(kind.lower())
        else:
            terms.append("lower(events.kind) = :kind")
            parameters["kind"] = kind.lower()
    where = f" WHERE {' AND '.join(terms)}" if terms else ""
    limited = " LIMIT :limit" if limit is not None else ""
    rows = [
        EventView(
            id=event_id,
            ts=ts,
            kind=event_kind,
            severity=event_severity,
            message=message,
            host=host_name,
            gpu_idx=gpu_idx,
            gpu_uuid=gpu_uuid,
            task_id=task_id,
            data={} if data_json is None else dict(json.loads(data_json)),
        )
        for (event_id, ts, event_kind, event_severity, message, host_name, gpu_idx, gpu_uuid,
             task_id, data_json) in reader.rows(
            f"{_EVENT_SELECT}{where} ORDER BY events.ts DESC, events.id DESC{limited}",
            parameters)
    ]
    rows.reverse()
    return rows
