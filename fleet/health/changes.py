"""HealthChange: one decision of the health rules (a GPU or host state change, or an event only)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from db.types import Severity


@dataclass(frozen=True)
class HealthChange:
    """One thing the rules decided: a GPU or host state change, or an event only.

    A change with `gpu_index` and `new_state` sets that GPU's state; one with no `gpu_index`
    and a `new_state` sets the host's state; `new_state` None means an event only.
    """

    host: str
    gpu_index: int | None
    kind: str
    severity: Severity
    old_state: str | None
    new_state: str | None
    message: str
    data: Mapping[str, object] = field(default_factory=dict)

    @property
    def sets_gpu_state(self) -> bool:
        """True when applying this change writes a GPU's state."""
        return self.gpu_index is not None and self.new_state is not None

    @property
    def sets_host_state(self) -> bool:
        """True when applying this change writes the host's state."""
        return self.gpu_index is None and self.new_state is not None

    def to_event(self, ts: float, event_id: int | None = None) -> dict[str, object]:
        """The change as the JSON-ready event dict hooks receive on stdin."""
        return {
            "id": event_id,
            "ts": ts,
            "kind": self.kind,
            "severity": self.severity,
            "host": self.host,
            "gpu_index": self.gpu_index,
            "old_state": self.old_state,
            "new_state": self.new_state,
            "message": self.message,
            "data": dict(self.data),
        }
