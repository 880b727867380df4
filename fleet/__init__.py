"""fleet: an agentless GPU fleet tool (see every GPU, place work on free ones, keep history).

The public API is `fleet.open()` (an async context manager yielding a `fleet.Fleet` service);
it is imported lazily so that `import fleet` and `fleet --help` stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from fleet.service import Fleet, open

__all__ = ["Fleet", "__version__", "open"]


def __getattr__(name: str) -> Any:
    if name in ("open", "Fleet"):
        from fleet import service

        return getattr(service, name)
    raise AttributeError(f"module 'fleet' has no attribute {name!r}")
