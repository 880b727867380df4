"""References between tables that no foreign key enforces, and the SQL that finds their orphans.

gpu_samples.gpu_id names a gpus.id without a constraint (migration 0011: the per-row check
dominated PostgreSQL's sample ingest, and fleet never deletes a GPU row). `fleet db check`
counts the rows whose referenced row is missing, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reference:
    """`table.column` holds an id of `parent.parent_column` (NULL: refers to nothing)."""

    table: str
    column: str
    parent: str
    parent_column: str = "id"

    def orphans_sql(self) -> str:
        """A portable `SELECT count(*)` of the rows that name a missing parent row."""
        return (f"SELECT count(*) FROM {self.table} c WHERE c.{self.column} IS NOT NULL AND "
                f"NOT EXISTS (SELECT 1 FROM {self.parent} p "
                f"WHERE p.{self.parent_column} = c.{self.column})")

    def problem(self, orphans: int) -> str:
        """How `fleet db check` reports `orphans` such rows."""
        return (f"reference: {orphans} {self.table} row(s) name a missing {self.parent} "
                f"({self.table}.{self.column}, not enforced by a foreign key)")


UNENFORCED_REFERENCES = (Reference("gpu_samples", "gpu_id", "gpus"),)
