"""fleet: an agentless GPU fleet tool (see every GPU, place work on free ones, keep history).

The public API is `fleet.open()` (an async context manager yielding a `fleet.Fleet` service);
it is imported lazily so that `import fleet` and `fleet --help` stay fast.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# asyncssh names cryptography's DSA key types when it is imported, and cryptography 51 warns
# about DSA on each such name, on every fleet command's stderr. fleet never uses DSA keys.
warnings.filterwarnings("ignore", message="DSA is deprecated", category=UserWarning,
                        module=r"asyncssh\.")

if TYPE_CHECKING:
    from fleet.service import Fleet, open

__all__ = ["Fleet", "__version__", "open"]


def __getattr__(name: str) -> Any:
    if name in ("open", "Fleet"):
        from fleet import service

        return getattr(service, name)
    raise AttributeError(f"module 'fleet' has no attribute {name!r}")
