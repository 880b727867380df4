"""Errors raised by the storage layer; fleet translates them into its own StorageError family.

DatabaseError           the database cannot be opened, migrated, read or written
├── InvalidDatabaseUrl  the URL itself is malformed: empty, unparsable, an unknown ~user
├── ReadOnlyDatabase    the SQLite file is read-only for this user: reads work, writes cannot
├── AllocationConflict  a GPU already has an active allocation (enforced by a unique index)
├── OverLimit           the owner would hold more GPUs than their limit allows
├── TaskNotActive       a claim's task has already ended (cancelled while it was placed)
└── Fenced              this controller's leadership is over: it may write nothing more
"""

from __future__ import annotations

from collections.abc import Sequence


class DatabaseError(Exception):
    """The database could not be opened, migrated, read or written; the message names the URL."""


class InvalidDatabaseUrl(DatabaseError):
    """The database URL or path given is malformed (empty, unparsable, an unknown `~user`, an
    unsupported SQLite option); nothing was opened or created."""


class AllocationConflict(DatabaseError):
    """At least one of the requested GPUs is already actively allocated."""

    def __init__(self, gpu_ids: Sequence[int], message: str) -> None:
        self.gpu_ids = tuple(gpu_ids)
        super().__init__(message)


class ReadOnlyDatabase(DatabaseError):
    """The database file was opened read-only (this user cannot write it) and a write, or a
    needed migration, was refused; the message names the file."""


class Fenced(DatabaseError):
    """This controller's leadership ended (another took over, or its lock session did): the
    write was refused and rolled back."""


class OverLimit(DatabaseError):
    """The claim would make its owner hold more GPUs than `limit` (they hold `held`)."""

    def __init__(self, held: int, limit: int) -> None:
        self.held = held
        self.limit = limit
        super().__init__(f"the owner holds {held} GPU(s); the limit is {limit}")


class TaskNotActive(DatabaseError):
    """The task a claim is for has already ended (cancelled while it was being placed); the
    claim made nothing."""

    def __init__(self, task_id: int) -> None:
        self.task_id = task_id
        super().__init__(f"task {task_id} has already ended")
