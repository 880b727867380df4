"""Stable SQL views for users querying the database directly (portable SQLite/PostgreSQL SQL).

Timestamps in the views: `ts_ms` epoch milliseconds and `ts_s` epoch seconds for samples; epoch
seconds for tasks and allocations. A later migration that rebuilds a table these views read
(an SQLite batch operation) must drop the views first and create them again afterwards.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SAMPLE_COLUMNS = """
    s.utilization_gpu_pct, s.utilization_memory_pct, s.memory_used_bytes, s.temperature_c,
    s.power_draw_w, s.fan_speed_pct, s.performance_state, s.clock_sm_mhz, s.clock_mem_mhz,
    s.ecc_errors_uncorrected, s.process_count, s.lost"""

VIEWS = {
    # Every GPU with its host and its newest sample (sample columns NULL if it has none).
    "gpu_latest": f"""
SELECT h.name AS host, h.state AS host_state, g.id AS gpu_id, g.idx AS gpu_index, g.uuid,
    g.name AS gpu_name, g.state AS gpu_state, g.drained, g.memory_total_bytes,
    s.ts AS ts_ms, s.ts / 1000 AS ts_s,{SAMPLE_COLUMNS}
FROM gpus g
JOIN hosts h ON h.id = g.host_id
LEFT JOIN gpu_samples s ON s.id = (
    SELECT s2.id FROM gpu_samples s2 WHERE s2.gpu_id = g.id ORDER BY s2.ts DESC, s2.id DESC LIMIT 1
)""",
    # Every GPU sample with the host name, GPU index and UUID it belongs to.
    "gpu_history": f"""
SELECT h.name AS host, g.idx AS gpu_index, g.uuid, g.name AS gpu_name, s.gpu_id,
    s.ts AS ts_ms, s.ts / 1000 AS ts_s,{SAMPLE_COLUMNS}
FROM gpu_samples s
JOIN gpus g ON g.id = s.gpu_id
JOIN hosts h ON h.id = g.host_id""",
    # Every task with the name of the host it ran on and its run time in seconds.
    "task_history": """
SELECT t.id AS task_id, t.name, t.state, t.owner, h.name AS host, t.gpus_requested, t.priority,
    t.exit_code, t.submitted_at, t.started_at, t.ended_at,
    CASE WHEN t.started_at IS NOT NULL AND t.ended_at IS NOT NULL
        THEN t.ended_at - t.started_at END AS duration_s,
    t.gpu_seconds, t.peak_memory_bytes, t.error, t.script, t.remote_dir
FROM tasks t
LEFT JOIN hosts h ON h.id = t.host_id""",
    # Allocations still holding a GPU (task or reservation).
    "active_allocations": """
SELECT a.id AS allocation_id, h.name AS host, g.idx AS gpu_index, g.uuid, a.kind, a.task_id,
    a.owner, a.note, a.created_at, a.expires_at
FROM allocations a
JOIN gpus g ON g.id = a.gpu_id
JOIN hosts h ON h.id = g.host_id
WHERE a.released_at IS NULL""",
}


def upgrade() -> None:
    """Create the views."""
    for name, select_sql in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {select_sql.strip()}")


def downgrade() -> None:
    """Drop the views."""
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW {name}")
