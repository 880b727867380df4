"""Plain SQL that runs the same text on either driver; importing it loads no SQLAlchemy.

db's queries are SQL text with named parameters (`:name`), written once in the subset SQLite
and PostgreSQL both speak. A `SqlReader` runs one: `SqliteReader` on a stdlib sqlite3
connection (what a short command reading an SQLite file uses, so it never imports
SQLAlchemy), `SessionReader` through a SQLAlchemy session or connection (PostgreSQL, and reads
inside a write transaction, which see its pending changes). Both return rows as sequences
indexed by column position. A `SqlWriter` also writes: `SqliteWriter` in one stdlib
transaction (what `fleet status` and the monitor's flush write through on an SQLite file),
`SessionWriter` inside a SQLAlchemy session's transaction (PostgreSQL, and ORM code that
writes in the same transaction).
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import TextClause
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

Row = Sequence[Any]
Parameters = Mapping[str, Any]
# How every INSERT that SqlWriter.insert runs ends: PostgreSQL returns the id, the stdlib SQLite
# writer drops the clause and reads the cursor's lastrowid (no SQLite 3.35 needed).
RETURNING_ID = " RETURNING id"
# Values bound per statement in an IN list: far under SQLite's variable limit (32766), and
# few enough distinct list lengths that each driver's statement cache keeps them all.
IN_LIST_CHUNK = 500


class SqlReader(ABC):
    """Runs SELECT statements (SQL text, `:name` parameters) and returns their rows."""

    @abstractmethod
    def rows(self, sql: str, parameters: Parameters | None = None) -> list[Row]:
        """Every row of the statement, in the order it returns them."""

    def rows_in(self, sql: str, name: str, values: Sequence[Any]) -> list[Row]:
        """Every row of `sql` for each of `values`: `{values}` in the text becomes an IN list
        of `:name_N` placeholders, asked in chunks so that any number of values fits (none:
        no rows)."""
        found: list[Row] = []
        for some_values in chunks(values):
            placeholders, parameters = in_list(name, some_values)
            found.extend(self.rows(sql.format(values=placeholders), parameters))
        return found

    def first(self, sql: str, parameters: Parameters | None = None) -> Row | None:
        """The first row, or None when there is none."""
        found = self.rows(sql, parameters)
        return found[0] if found else None

    def scalars(self, sql: str, parameters: Parameters | None = None) -> list[Any]:
        """The first column of every row."""
        return [row[0] for row in self.rows(sql, parameters)]

    def scalar(self, sql: str, parameters: Parameters | None = None) -> Any:
        """The first column of the first row, or None when there is no row."""
        row = self.first(sql, parameters)
        return None if row is None else row[0]


class SqliteReader(SqlReader):
    """Reads through a stdlib sqlite3 connection, which binds `:name` parameters itself."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def rows(self, sql: str, parameters: Parameters | None = None) -> list[Row]:
        return self.connection.execute(sql, parameters or {}).fetchall()


class SessionReader(SqlReader):
    """Reads through a SQLAlchemy session or connection (the statement as `text()`).

    Through a session, a read sees what the session has written but not yet committed (it
    flushes first), so write code can read back in the same transaction.
    """

    def __init__(self, executor: Session | Connection) -> None:
        self.executor = executor

    def rows(self, sql: str, parameters: Parameters | None = None) -> list[Row]:
        return list(self.executor.execute(_text(sql), parameters or {}).all())


class SqlWriter(SqlReader):
    """Runs reads and writes in one transaction, which the writer's owner commits.

    `commit` ends the transaction early (the samples' one commit, as record_sample_rows does
    through a session); later statements run in a new one.
    """

    @abstractmethod
    def execute(self, sql: str, parameters: Parameters | None = None) -> int:
        """Run one INSERT, UPDATE or DELETE; returns how many rows it touched."""

    @abstractmethod
    def commit(self) -> None:
        """Commit what was written so far."""

    @abstractmethod
    def rollback(self) -> None:
        """Undo what was written since the last commit."""

    def insert(self, sql: str, parameters: Parameters | None = None) -> int:
        """Run one INSERT that ends with RETURNING_ID and return the new row's id."""
        if not sql.endswith(RETURNING_ID):
            raise ValueError(f"an insert must end with{RETURNING_ID}: {sql}")
        row = self.first(sql, parameters)
        if row is None:
            raise RuntimeError(f"no id returned by: {sql}")
        return int(row[0])


class SqliteWriter(SqliteReader, SqlWriter):
    """Writes through a stdlib sqlite3 connection in autocommit mode (isolation_level=None):
    the first statement after a commit opens `BEGIN IMMEDIATE`, so a read-then-write never
    fails to upgrade its lock, and busy_timeout waits out another writer."""

    def rows(self, sql: str, parameters: Parameters | None = None) -> list[Row]:
        self._begin()
        return super().rows(sql, parameters)

    def execute(self, sql: str, parameters: Parameters | None = None) -> int:
        self._begin()
        return self.connection.execute(sql, parameters or {}).rowcount

    def insert(self, sql: str, parameters: Parameters | None = None) -> int:
        if not sql.endswith(RETURNING_ID):
            raise ValueError(f"an insert must end with{RETURNING_ID}: {sql}")
        self._begin()
        cursor = self.connection.execute(sql.removesuffix(RETURNING_ID), parameters or {})
        if cursor.lastrowid is None:
            raise RuntimeError(f"no id for: {sql}")
        return cursor.lastrowid

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One executemany of `sql` (`?` placeholders, one per value of each row)."""
        self._begin()
        self.connection.executemany(sql, rows)

    def commit(self) -> None:
        if self.connection.in_transaction:
            self.connection.execute("COMMIT")

    def rollback(self) -> None:
        if self.connection.in_transaction:
            self.connection.execute("ROLLBACK")

    def _begin(self) -> None:
        if not self.connection.in_transaction:
            self.connection.execute("BEGIN IMMEDIATE")


class SessionWriter(SessionReader, SqlWriter):
    """Writes through a SQLAlchemy session (its transaction; the session's owner commits).

    Statements see the session's pending ORM changes (it flushes first), but ORM objects the
    session already holds do not see what a statement here changed: code that mixes the two
    on one table reads the table again with SQL.
    """

    executor: Session

    def __init__(self, session: Session) -> None:
        super().__init__(session)

    def execute(self, sql: str, parameters: Parameters | None = None) -> int:
        result = self.executor.execute(_text(sql), parameters or {})
        return int(result.rowcount)  # type: ignore[attr-defined]

    def commit(self) -> None:
        self.executor.commit()

    def rollback(self) -> None:
        self.executor.rollback()


def writer_of(target: Session | SqlWriter) -> SqlWriter:
    """`target` as a SqlWriter: a session is wrapped in a SessionWriter."""
    if isinstance(target, SqlWriter):
        return target
    return SessionWriter(target)


@lru_cache(maxsize=512)
def _text(sql: str) -> TextClause:
    """The text() construct of `sql`, made once: SQLAlchemy then reuses its compiled form."""
    from sqlalchemy import text

    return text(sql)


def in_list(name: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """Placeholders `:name_0, :name_1, ...` for an IN list of `values`, and their bindings.

    `values` must not be empty (`x IN ()` is not SQL); callers answer an empty list
    themselves.
    """
    if not values:
        raise ValueError(f"an IN list ({name}) needs at least one value")
    names = [f"{name}_{index}" for index in range(len(values))]
    return ", ".join(f":{key}" for key in names), dict(zip(names, values, strict=True))


def bucket_start(column: str, width: int) -> str:
    """The start of the bucket of `width` that the integer `column` falls in: `/` on integers
    truncates on both backends (times are positive). The width is written into the text, not
    bound, so that a GROUP BY on this expression is the same text as the SELECT's, which
    PostgreSQL requires."""
    return f"({column} / {int(width)}) * {int(width)}"


def chunks(values: Sequence[Any], size: int = IN_LIST_CHUNK) -> Iterable[Sequence[Any]]:
    """`values` in consecutive slices of at most `size`, for IN lists of any length."""
    for start in range(0, len(values), size):
        yield values[start:start + size]
