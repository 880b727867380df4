"""The monitor's settings sections as frozen dataclasses, each field with its doc and bounds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleet.ssh.options import SshOptions


def setting(
    default: Any,
    doc: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    duration: bool = False,
) -> Any:
    """A dataclass field carrying its documentation and bounds for the settings loader.

    `duration`: the YAML value may be a number of seconds or a text like "90s", "5m", "2h".
    A mutable `default` (an empty mapping) is copied for each instance.
    """
    metadata = {"doc": doc, "minimum": minimum, "maximum": maximum, "duration": duration}
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class MonitorSettings:
    """How often hosts are read, when a probe counts as stalled, how samples are written."""

    interval: float = setting(
        1.0, "seconds between two readings of each host", minimum=0.05, maximum=3600,
        duration=True,
    )
    stall_intervals: int = setting(
        3, "a probe silent for this many intervals is restarted", minimum=2, maximum=1000
    )
    flush_interval: float = setting(
        5.0, "seconds between two database writes of buffered samples (events and host state "
        "changes are written at once)", minimum=0.05, maximum=600, duration=True,
    )
    flush_rows: int = setting(
        5000, "write at once when this many sample rows are buffered", minimum=1,
        maximum=1_000_000,
    )
    max_handshakes: int = setting(
        32, "SSH handshakes in flight at once (so hundreds of hosts do not stampede)",
        minimum=1, maximum=4096,
    )
    reconnect_initial: float = setting(
        1.0, "first wait before reconnecting to a failed host", minimum=0.01, maximum=3600,
        duration=True,
    )
    reconnect_max: float = setting(
        60.0, "longest wait between reconnects (the wait doubles after each failure)",
        minimum=0.01, maximum=86400, duration=True,
    )
    reconnect_jitter: float = setting(
        0.2, "random spread of each reconnect wait, as a fraction of it", minimum=0.0,
        maximum=1.0,
    )
    stop_grace: float = setting(
        3.0, "on shutdown, how long a probe may take to exit after its stdin closes",
        minimum=0.1, maximum=60, duration=True,
    )
    tasks_dir: str = setting(
        "~/.fleet/tasks", "directory on each host whose free disk space the probe reports"
    )

    def __post_init__(self) -> None:
        if self.reconnect_max < self.reconnect_initial:
            raise ValueError("reconnect_max must be >= reconnect_initial")

    @property
    def stall_timeout(self) -> float:
        """Seconds without a reading after which a running probe is restarted."""
        return self.interval * self.stall_intervals


@dataclass(frozen=True)
class SshSettings:
    """Every SSH wait fleet makes is bounded by one of these."""

    connect_timeout: float = setting(
        10.0, "TCP connect + key exchange deadline", minimum=0.1, maximum=600, duration=True
    )
    login_timeout: float = setting(
        10.0, "authentication deadline after the key exchange", minimum=0.1, maximum=600,
        duration=True,
    )
    keepalive_interval: float = setting(
        5.0, "seconds between keepalives on idle connections (0: off)", minimum=0,
        maximum=3600, duration=True,
    )
    keepalive_count_max: int = setting(
        3, "unanswered keepalives before a connection counts as dead", minimum=1, maximum=100
    )
    command_timeout: float = setting(
        30.0, "deadline of one remote command, and of a probe's first reading", minimum=0.1,
        maximum=3600, duration=True,
    )

    def apply(self, options: SshOptions) -> SshOptions:
        """`options` with these timeouts (host-key policy and files left as they are)."""
        from dataclasses import replace

        return replace(
            options,
            connect_timeout=self.connect_timeout,
            login_timeout=self.login_timeout,
            keepalive_interval=self.keepalive_interval,
            keepalive_count_max=self.keepalive_count_max,
            command_timeout=self.command_timeout,
        )
