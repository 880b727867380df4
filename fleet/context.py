"""What every service shares: the database, the managed hosts, SSH options and the clock.

Services take a `FleetContext` and never the `Fleet` facade, so no service reaches a sibling
by `getattr` and each one's dependencies are visible in its constructor. Database work goes
through `read`/`write` (off the event loop, one session, errors mapped at the one edge), and
plain SQL through `query` and `write_sql` (a db.sql reader or writer: on an SQLite file no
SQLAlchemy is loaded).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from fleet.managed_hosts import ManagedHosts
from fleet.storage import storage_errors

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db.engine import Database
    from db.sql import SqlReader, SqlWriter
    from fleet.inventory import Inventory
    from fleet.ssh.options import SshOptions
    from fleet.ssh.pool import ConnectionPool

T = TypeVar("T")


class FleetContext:
    """One fleet session's shared state; create it once per `fleet.open()`.

    The inventory may be given as a loader: it is read on first use, so commands that only
    read the database (events, history, tasks) neither pay for nor fail on the inventory.
    """

    def __init__(self, database: Database, inventory: Inventory | Callable[[], Inventory],
                 ssh_options: SshOptions, *, clock: Callable[[], float] = time.time) -> None:
        self.database = database
        self._given_ssh_options = ssh_options
        self._ssh_options: SshOptions | None = None
        self.clock = clock
        self._inventory = inventory if not callable(inventory) else None
        self._load_inventory = inventory if callable(inventory) else None
        self.hosts = ManagedHosts(lambda: self.inventory, database)
        # The open connections of the monitor running in this process, which tasks share;
        # None (no monitor): each task opens its own, as a one-shot CLI process does.
        self.connections: ConnectionPool | None = None
        # False on a pair's standby: only the leader probes hosts, placement reads its samples.
        self.may_probe = True

    @property
    def ssh_options(self) -> SshOptions:
        """The SSH options given, with the settings' `ssh:` timeouts (the settings file's, then
        the inventory's) applied: every connection of every command is bounded by them.
        Read with the inventory, on first use; a bad setting is a ConfigError naming its line."""
        if self._ssh_options is None:
            from fleet.settings_path import settings_file_expected

            inventory = self.inventory
            if settings_file_expected() or inventory.settings_line:
                from fleet.monitor.config import load_settings  # ~10 ms: only with settings

                options = load_settings(inventory).ssh.apply(self._given_ssh_options)
            else:  # the defaults, which SshOptions's own are (a test holds them equal)
                options = self._given_ssh_options
            self._ssh_options = options
        return self._ssh_options

    @property
    def inventory(self) -> Inventory:
        """The inventory as loaded (hosts, groups, settings), without adopted hosts."""
        if self._inventory is None:
            assert self._load_inventory is not None
            self._inventory = self._load_inventory()
        return self._inventory

    def now(self) -> float:
        """The current epoch time by this context's clock."""
        return self.clock()

    def in_session(self, action: str, work: Callable[[Session], T]) -> T:
        """`work(session)` in one committed session, database errors as StorageError."""
        with storage_errors(action, self.database.url), self.database.session() as session:
            return work(session)

    def in_writer(self, action: str, work: Callable[[SqlWriter], T]) -> T:
        """`work(writer)` in one committed transaction of plain SQL, errors as StorageError."""
        with storage_errors(action, self.database.url), self.database.writer() as writer:
            return work(writer)

    def in_reader(self, action: str, work: Callable[[SqlReader], T]) -> T:
        """`work(reader)` on one snapshot of the database, errors as StorageError."""
        with storage_errors(action, self.database.url), self.database.reader() as reader:
            return work(reader)

    def guarded(self, action: str, work: Callable[[], T]) -> T:
        """`work()` (which opens its own sessions) with database errors as StorageError."""
        with storage_errors(action, self.database.url):
            return work()

    async def read(self, action: str, work: Callable[[Session], T]) -> T:
        """`in_session` off the event loop."""
        return await asyncio.to_thread(self.in_session, action, work)

    async def write(self, action: str, work: Callable[[Session], T]) -> T:
        """`in_session` off the event loop, shielded so a cancelled caller still commits."""
        return await asyncio.shield(asyncio.to_thread(self.in_session, action, work))

    async def write_sql(self, action: str, work: Callable[[SqlWriter], T]) -> T:
        """`in_writer` off the event loop, shielded so a cancelled caller still commits."""
        return await asyncio.shield(asyncio.to_thread(self.in_writer, action, work))

    async def query(self, action: str, work: Callable[[SqlReader], T]) -> T:
        """`in_reader` off the event loop."""
        return await asyncio.to_thread(self.in_reader, action, work)

    async def call(self, action: str, work: Callable[[], T]) -> T:
        """`guarded` off the event loop."""
        return await asyncio.to_thread(self.guarded, action, work)
