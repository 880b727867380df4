"""What `fleet dispatch` asks for and what it gets back: light enough for a client process.

A client that hands its task to `fleet serve` imports this module, not the engine (no database,
no SSH library).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fleet.dispatch.ending import DEFAULT_GRACE_S
from fleet.dispatch.spec import TaskLaunch, build_launch
from fleet.model import HostSpec

if TYPE_CHECKING:
    from fleet.dispatch.environment import TaskEnvironment
    from fleet.dispatch.snapshot import Snapshot
    from fleet.placement.claim import Claim
    from fleet.placement.request import PlacementRequest

DEFAULT_QUEUE_TIMEOUT_S = 24 * 3600.0
# Cancelling a queued dispatch with this message (fleet serve stopping) leaves the task queued
# for the next server to resume, instead of ending it cancelled.
KEEP_QUEUED = "fleet serve is stopping: the task stays queued"


@dataclass(frozen=True)
class DispatchRequest:
    """What `fleet dispatch` was asked to run, and where it may run."""

    script: Path
    placement: PlacementRequest
    args: tuple[str, ...] = ()
    extras: tuple[Path, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None
    python: str | None = None
    timeout_s: float | None = None
    grace_s: float = DEFAULT_GRACE_S
    name: str | None = None
    priority: int = 0
    wait: bool = False
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S
    owner: str | None = None
    notify: bool = False  # --notify: the task's events say so, for webhooks' only_notified
    override_limits: bool = False  # --override-limits (admins through the server): recorded
    # The paths as the user named them, when the files were staged elsewhere (fleet serve).
    shown_script: str | None = None
    shown_extras: tuple[str, ...] | None = None
    hostfile: str = "hostfile"  # a gang's hostfile, relative to each node's task directory
    environment: TaskEnvironment | None = None  # --venv/--conda/--container
    snapshot: Snapshot | None = None  # --snapshot, taken (fleet.dispatch.snapshot)

    @property
    def is_gang(self) -> bool:
        """True when the task runs on more than one node (placement.nodes > 1)."""
        return self.placement.nodes > 1

    def validate(self) -> TaskLaunch:
        """Check the script, files and env before anything is recorded (ConfigError if bad)."""
        return self.launch(0, "python3", ())

    def launch(self, task_id: int, host_python: str, gpu_uuids: tuple[str, ...]) -> TaskLaunch:
        return build_launch(
            task_id=task_id, script=self.script, host_python=host_python, gpu_uuids=gpu_uuids,
            args=self.args, extras=self.extras, env=self.env, workdir=self.workdir,
            python=self.python, timeout_s=self.timeout_s, timeout_grace_s=self.grace_s,
            environment=self.environment, snapshot=self.snapshot,
        )

    def stored_constraints(self) -> dict[str, object]:
        """What the task row keeps (env values are left out: they may be secrets)."""
        return {
            "placement": self.placement.to_dict(),
            "with": list(self.shown_extras or (str(path) for path in self.extras)),
            "env_names": [name for name, _ in self.env],
            "workdir": self.workdir,
            "python": self.python,
            "timeout_s": self.timeout_s,
            "grace_s": self.grace_s,
            "wait": self.wait,  # dispatched to wait in the queue (task_started is told then)
            "notify": self.notify,
            "environment": None if self.environment is None else self.environment.to_dict(),
            "snapshot": None if self.snapshot is None else self.snapshot.to_dict(),
            **({"gang": {"nodes": self.placement.nodes, "gpus_per_node": self.placement.gpus,
                         "same": self.placement.same, "hostfile": self.hostfile}}
               if self.is_gang else {}),
        }


@dataclass(frozen=True)
class StartedTask:
    """A task running on its host."""

    task_id: int
    host: HostSpec
    task_dir: str
    pgid: int | None
    gpu_uuids: tuple[str, ...]
    started_at: int
    timeout_s: float | None = None
    claim: Claim | None = field(default=None, compare=False)
    gpu_indices: tuple[int, ...] = ()  # on the host, as its claim names them
    explanation: str | None = field(default=None, compare=False)  # asked for with explain
    # A gang's rank 0 carries every node, rank order (itself first); empty for a lone task.
    nodes: tuple[StartedTask, ...] = field(default=(), compare=False)
