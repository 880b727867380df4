"""A controller pair on one PostgreSQL database: which `fleet serve` leads, the standby's wait
for the lock, the leader's heartbeat, and the fence on the leader's writes.

The leader holds the database's advisory lock (db.serve_lock) on a session the server ends
after `timeout_s` idle, and beats every `timeout_s / 5`. A standby tries the lock every
`poll_s`; once it has it, it bumps the leadership epoch (db.leadership) and only then starts
probing and writing. Every session of the leader checks its epoch first, so a leader that lost
its lock (killed session, cut link, frozen process) writes nothing more; it then stops, and a
supervisor that restarts it brings it back as the standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from fleet.errors import StorageError
from fleet.server.locks import MONITOR_PREFIX

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db.engine import Database

log = logging.getLogger(__name__)

T = TypeVar("T")

LEADER_PREFIX = "fleet serve pid "
STANDBY_PREFIX = "fleet serve standby pid "
# How long a takeover waits for a row lock held by the old leader's last transaction, per try
# (the server ends a frozen leader's transaction after db.leadership.IDLE_IN_TRANSACTION_S).
TAKEOVER_LOCK_WAIT_S = 2.0
TAKEOVER_TRIES = 10


class LeadershipLost(StorageError):
    """This server led the pair and no longer does: it stops so that a restart rejoins as the
    standby (exit 4, like any storage failure)."""


def process_label() -> str:
    """How the pair names this process: `pid N on HOST`."""
    return f"{os.getpid()} on {socket.gethostname()}"


class Leadership:
    """This server's part in the pair: standby until `campaign` returns True, then leader
    until `lost` is set."""

    def __init__(self, database: Database, *, timeout_s: float, poll_s: float) -> None:
        from db.serve_lock import ServeLock

        self.database = database
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.label = process_label()
        self._lock = ServeLock(database.engine, STANDBY_PREFIX + self.label)
        self.epoch: int | None = None
        self.lost = asyncio.Event()
        self._fenced_reason: str | None = None  # read by the fence in worker threads
        self._beating: asyncio.Task[None] | None = None

    @property
    def leading(self) -> bool:
        """Whether this server leads now (elected, and not lost since)."""
        return self.epoch is not None and not self.lost.is_set()

    @property
    def role(self) -> str:
        """`leader`, `standby`, or `lost` once a leader lost its lock."""
        return "lost" if self.lost.is_set() else "leader" if self.epoch is not None \
            else "standby"

    async def _call(self, action: str, work: Callable[..., T], *args: object) -> T:
        from fleet.storage import storage_errors

        def guarded() -> T:
            with storage_errors(action, self.database.url):
                return work(*args)
        return await asyncio.to_thread(guarded)

    async def try_lead(self) -> bool:
        """One try at the lock (and, when it is free, the takeover): whether this server leads.
        """
        if not await self._call("try the leader lock", self._lock.try_acquire):
            return False
        await self._take_over()
        return True

    async def campaign(self, stop: asyncio.Event) -> bool:
        """Try every `poll_s` until this server leads (True) or `stop` is set first (False).

        An unreachable database is tried again (and logged once per outage).
        """
        failing = False
        while not stop.is_set():
            try:
                if await self.try_lead():
                    return True
                failing = False
            except StorageError as exc:
                if not failing:
                    log.warning("standby: %s; trying again every %gs", exc, self.poll_s)
                failing = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_s)
        return False

    async def _take_over(self) -> None:
        """Bump the epoch (waiting, bounded, for the old leader's last transaction), then
        fence this process's writes with it and start beating."""
        from sqlalchemy.exc import OperationalError

        for _ in range(TAKEOVER_TRIES):
            try:
                self.epoch = await self._call("take over the leadership", self._bump)
                break
            except StorageError as exc:
                if not isinstance(exc.__cause__, OperationalError):
                    raise
                log.info("takeover waits for the old leader's last transaction: %s", exc)
        else:
            raise LeadershipLost(f"could not take over the leadership of "
                                 f"{self.database.display_url} in {TAKEOVER_TRIES} tries")
        await self._call("keep the leader lock", self._lock.end_when_idle, self.timeout_s)
        await self._call("name the leader", self._lock.relabel, LEADER_PREFIX + self.label)
        self.database.fence = self._fence
        self._beating = asyncio.create_task(self._beat(), name="fleet-serve-heartbeat")
        log.info("leading %s (epoch %d)", self.database.display_url, self.epoch)

    def _bump(self) -> int:
        from sqlalchemy import text

        from db.leadership import take_over

        with self.database.engine.connect() as connection:
            connection.execute(text("SELECT set_config('lock_timeout', :wait, true)"),
                               {"wait": f"{int(TAKEOVER_LOCK_WAIT_S * 1000)}ms"})
            epoch = take_over(connection, LEADER_PREFIX + self.label, time.time())
            connection.commit()
        return epoch

    def _fence(self, session: Session) -> None:
        from db.errors import Fenced
        from db.leadership import check_epoch

        if self._fenced_reason is not None:
            raise Fenced(self._fenced_reason)
        assert self.epoch is not None
        check_epoch(session, self.epoch)

    async def _beat(self) -> None:
        """One round trip on the lock's session every timeout_s / 5; the first that fails or
        hangs past timeout_s ends the leadership."""
        from sqlalchemy.exc import SQLAlchemyError

        interval = self.timeout_s / 5
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.wait_for(asyncio.to_thread(self._lock.heartbeat), self.timeout_s)
            except (TimeoutError, SQLAlchemyError, RuntimeError, OSError) as exc:
                self.lose(f"its lock session ended ({_first_line(exc)})")
                return

    def lose(self, why: str) -> None:
        """Leadership is over: refuse every write from now on and wake whoever waits."""
        if self._fenced_reason is None:
            self._fenced_reason = f"this fleet serve no longer leads: {why}"
            log.error("lost the leadership of %s: %s", self.database.display_url, why)
        self.lost.set()

    def lost_reason(self) -> str:
        """Why this server no longer leads (empty while it does)."""
        return self._fenced_reason or ""

    async def leader(self) -> str:
        """The current leader in words: `pid N on HOST, epoch E since TIME` (or nobody)."""
        from db.leadership import current_leader

        holder = await self._call("read the leader lock", self._lock.holder)
        record = await self._call("read the leadership", self._read_record, current_leader)
        if holder is None:
            return "no leader right now"
        if holder.startswith(MONITOR_PREFIX):
            return f"none: {holder} records the database"
        named = holder.removeprefix(LEADER_PREFIX)
        if record is None or record.holder != holder:
            return f"pid {named}"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.since_s))
        return f"pid {named}, epoch {record.epoch} since {since}"

    def _read_record(self, read: Callable[..., T]) -> T:
        with self.database.engine.connect() as connection:
            return read(connection)

    async def close(self) -> None:
        """Stop beating and let go of the lock (a stopping server hands over at once)."""
        beating, self._beating = self._beating, None
        if beating is not None:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
        try:
            await self._call("release the leader lock", self._lock.release)
        except StorageError as exc:  # its session is gone already: so is the lock
            log.info("%s", exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
