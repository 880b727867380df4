"""The events the monitor makes itself: a host's clock skew, a failed hook or webhook."""

from __future__ import annotations

from fleet.monitor.batch import EventIn
from fleet.monitor.clock import CLOCK_SKEW_TOLERANCE_S, describe_offset


def clock_skew_event(name: str, offset: float, skewed: bool, now: float) -> EventIn:
    """`clock_skew`: host `name`'s clock went beyond the tolerance (a warning) or came back
    within it (info); `offset` is the controller's time minus the host's."""
    if skewed:
        message = (f"{name}: clock {describe_offset(offset)} the controller's (more than "
                   f"{CLOCK_SKEW_TOLERANCE_S:g} s): its samples are stored at controller "
                   f"time, its own time {offset:+.1f} s")
    else:
        message = f"{name}: clock back in step with the controller's ({describe_offset(offset)})"
    return EventIn(ts=now, kind="clock_skew", severity="warning" if skewed else "info",
                   message=message, host=name,
                   data={"offset_s": round(offset, 3), "skewed": skewed})


def hook_failed_event(failure: dict[str, object], now: float) -> EventIn:
    """`hook_failed` / `webhook_failed` from a runner's failure report (its kind, message,
    host, GPU index and data, each taken only when of the right type)."""
    gpu_index = failure.get("gpu_index")
    host = failure.get("host")
    data = failure.get("data")
    return EventIn(
        ts=now, kind=str(failure.get("kind")), severity="warning",
        message=str(failure.get("message")),
        host=host if isinstance(host, str) else None,
        gpu_index=gpu_index if isinstance(gpu_index, int) else None,
        data=dict(data) if isinstance(data, dict) else {},
    )
