"""The controller pair's leadership record: who leads, since when, and the epoch that fences.

Every takeover bumps `epoch`. A leader checks, at the start of each of its transactions, that
the epoch is still the one it was elected with, and holds the row FOR SHARE until it commits:
a takeover's bump waits for those transactions to end, and a leader that was frozen through a
takeover finds a newer epoch and writes nothing (`check_epoch` raises Fenced).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, Float, Integer, MetaData, Table, Text, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from db.errors import Fenced

# Kept out of db.models' metadata: a leadership row belongs to one database's controllers, so
# `fleet db copy` and `db check` have nothing to carry or check in it.
metadata = MetaData()
leadership = Table(
    "fleet_leadership", metadata,
    Column("id", Integer, primary_key=True),
    Column("epoch", BigInteger, nullable=False),
    Column("holder", Text, nullable=False),
    Column("since_s", Float, nullable=False),
)

# A leader's transaction that sits idle this long (its process frozen mid-write) is ended by
# the server, so that it can neither hold up a takeover nor commit after one.
IDLE_IN_TRANSACTION_S = 5


@dataclass(frozen=True)
class Leader:
    """The leadership record: the epoch of the newest takeover, its holder and its time."""

    epoch: int
    holder: str
    since_s: float


def take_over(connection: Connection, holder: str, now_s: float) -> int:
    """Bump the epoch for `holder` (the caller holds the leader lock) and return the new one."""
    epoch = connection.execute(text(
        "INSERT INTO fleet_leadership (id, epoch, holder, since_s) VALUES (1, 1, :holder, :now) "
        "ON CONFLICT (id) DO UPDATE SET epoch = fleet_leadership.epoch + 1, "
        "holder = excluded.holder, since_s = excluded.since_s RETURNING epoch"),
        {"holder": holder, "now": now_s}).scalar_one()
    return int(epoch)


def current_leader(session: Session | Connection) -> Leader | None:
    """The leadership record (None before the first takeover)."""
    row = session.execute(select(leadership.c.epoch, leadership.c.holder, leadership.c.since_s)
                          .where(leadership.c.id == 1)).first()
    return None if row is None else Leader(int(row.epoch), str(row.holder), float(row.since_s))


def check_epoch(session: Session, epoch: int) -> None:
    """Fenced unless `epoch` is still the newest; holds the record until the session commits.

    PostgreSQL only (FOR SHARE, and the server ends this transaction if it idles
    IDLE_IN_TRANSACTION_S: a frozen leader cannot keep a takeover waiting).
    """
    found = session.execute(text(
        "SELECT epoch, set_config('idle_in_transaction_session_timeout', :idle, true) "
        "FROM fleet_leadership WHERE id = 1 FOR SHARE"),
        {"idle": f"{IDLE_IN_TRANSACTION_S}s"}).scalar()
    if found != epoch:
        raise Fenced(f"leadership epoch {epoch} is over (the database's is {found}): "
                     "another fleet serve took over")
