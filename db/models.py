"""SQLAlchemy 2.0 table models of the fleet database (the schema the migrations must reproduce).

Timestamps: integer epoch seconds in hosts, gpus, tasks, allocations, events and candidates;
integer epoch milliseconds (`ts`, `bucket_ts`) in the sample tables, which are compact and sort
cheaply. JSON-valued columns (`*_json`) hold text written with `json.dumps`. Every integer a
probe reports is 64-bit, the range the probe parser accepts.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from db.types import (
    ALLOCATION_KINDS,
    CANDIDATE_STATES,
    GPU_STATES,
    HOST_SOURCES,
    HOST_STATES,
    SEVERITIES,
    TASK_STATES,
)
from db.types import CONNECTIONS as HOST_CONNECTIONS

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# A 64-bit id on PostgreSQL; on SQLite it must be plain INTEGER to alias the rowid.
BigId = BigInteger().with_variant(Integer(), "sqlite")
# A probe-reported integer: 64-bit everywhere (SQLite's INTEGER already is; migration 0006
# widened PostgreSQL's columns without rebuilding SQLite tables).
ProbeInt = BigInteger().with_variant(Integer(), "sqlite")


def _one_of(column: str, values: tuple[str, ...]) -> str:
    """SQL for a CHECK that `column` holds one of `values`."""
    quoted = ", ".join(f"'{value}'" for value in values)
    return f"{column} IN ({quoted})"


class Base(DeclarativeBase):
    """Declarative base whose metadata names every constraint (Alembic batch mode needs names)."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Host(Base):
    """A machine fleet knows, identified by (address, port)."""

    __tablename__ = "hosts"
    __table_args__ = (
        UniqueConstraint("address", "port"),
        CheckConstraint(_one_of("connection", HOST_CONNECTIONS), name="connection"),
        CheckConstraint(_one_of("source", HOST_SOURCES), name="source"),
        CheckConstraint(_one_of("state", HOST_STATES), name="state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    address: Mapped[str] = mapped_column(String(255))
    port: Mapped[int] = mapped_column(Integer)
    user: Mapped[str | None] = mapped_column(String(255))
    connection: Mapped[str] = mapped_column(String(16))
    source: Mapped[str] = mapped_column(String(16))
    groups_json: Mapped[str] = mapped_column(Text)
    labels_json: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(32))
    state_reason: Mapped[str | None] = mapped_column(Text)
    drained: Mapped[bool] = mapped_column(Boolean)
    drain_reason: Mapped[str | None] = mapped_column(Text)
    hostname: Mapped[str | None] = mapped_column(String(255))
    kernel: Mapped[str | None] = mapped_column(String(255))
    driver_version: Mapped[str | None] = mapped_column(String(64))
    cuda_driver_version: Mapped[str | None] = mapped_column(String(64))
    cpu_count: Mapped[int | None] = mapped_column(ProbeInt)
    memory_total_bytes: Mapped[int | None] = mapped_column(BigInteger)
    gpu_count: Mapped[int | None] = mapped_column(ProbeInt)
    first_seen: Mapped[int] = mapped_column(BigInteger)  # when first listed
    # The last good reading (first_seen until the host is first reached); not moved by listing.
    last_seen: Mapped[int] = mapped_column(BigInteger)
    last_probe_at: Mapped[int | None] = mapped_column(BigInteger)  # the last try, good or not


class Gpu(Base):
    """One GPU of a host, identified by its index on that host; its UUID is indexed."""

    __tablename__ = "gpus"
    __table_args__ = (
        UniqueConstraint("host_id", "idx"),
        Index("ix_gpus_uuid", "uuid"),
        CheckConstraint(_one_of("state", GPU_STATES), name="state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    idx: Mapped[int] = mapped_column(Integer)
    uuid: Mapped[str | None] = mapped_column(String(128))
    name: Mapped[str | None] = mapped_column(String(255))
    pci_bus_id: Mapped[str | None] = mapped_column(String(64))
    memory_total_bytes: Mapped[int | None] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(16))
    drained: Mapped[bool] = mapped_column(Boolean)
    drain_reason: Mapped[str | None] = mapped_column(Text)
    first_seen: Mapped[int] = mapped_column(BigInteger)
    last_seen: Mapped[int] = mapped_column(BigInteger)
    # processes fleet did not start, as last judged (db.unmanaged); NULL: none
    unmanaged_json: Mapped[str | None] = mapped_column(Text)


class HostSample(Base):
    """One reading of a host's load, memory, disk and network (ts in epoch milliseconds)."""

    __tablename__ = "host_samples"
    __table_args__ = (Index("ix_host_samples_host_id_ts", "host_id", "ts"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    ts: Mapped[int] = mapped_column(BigInteger)
    load_1m: Mapped[float | None] = mapped_column(Float)
    load_5m: Mapped[float | None] = mapped_column(Float)
    load_15m: Mapped[float | None] = mapped_column(Float)
    cpu_busy_pct: Mapped[float | None] = mapped_column(Float)
    memory_available_bytes: Mapped[int | None] = mapped_column(BigInteger)
    disk_root_free_bytes: Mapped[int | None] = mapped_column(BigInteger)
    disk_tasks_free_bytes: Mapped[int | None] = mapped_column(BigInteger)
    net_rx_bytes: Mapped[int | None] = mapped_column(BigInteger)
    net_tx_bytes: Mapped[int | None] = mapped_column(BigInteger)


class GpuSample(Base):
    """One reading of a GPU (ts in epoch milliseconds); every value may be NULL if unsupported."""

    __tablename__ = "gpu_samples"
    __table_args__ = (
        Index("ix_gpu_samples_gpu_id_ts", "gpu_id", "ts"),
        Index("ix_gpu_samples_ts", "ts"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    # A gpus.id, deliberately without a foreign key (migration 0011; db.references checks it).
    gpu_id: Mapped[int] = mapped_column(Integer)
    ts: Mapped[int] = mapped_column(BigInteger)
    utilization_gpu_pct: Mapped[float | None] = mapped_column(Float)
    utilization_memory_pct: Mapped[float | None] = mapped_column(Float)
    memory_used_bytes: Mapped[int | None] = mapped_column(BigInteger)
    temperature_c: Mapped[float | None] = mapped_column(Float)
    power_draw_w: Mapped[float | None] = mapped_column(Float)
    fan_speed_pct: Mapped[float | None] = mapped_column(Float)
    performance_state: Mapped[int | None] = mapped_column(ProbeInt)
    clock_sm_mhz: Mapped[int | None] = mapped_column(ProbeInt)
    clock_mem_mhz: Mapped[int | None] = mapped_column(ProbeInt)
    ecc_errors_uncorrected: Mapped[int | None] = mapped_column(BigInteger)
    process_count: Mapped[int | None] = mapped_column(ProbeInt)
    lost: Mapped[bool] = mapped_column(Boolean)


class GpuRollupColumns:
    """What a rollup row of one GPU and period holds (bucket_ts: period start, epoch ms).

    `*_samples`: how many of the period's samples had that reading (the weights of its
    averages); NULL, like mem_used_avg, in minutes rolled up before migration 0013.
    """

    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"), primary_key=True)
    bucket_ts: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    samples: Mapped[int] = mapped_column(Integer)
    util_avg: Mapped[float | None] = mapped_column(Float)
    util_max: Mapped[float | None] = mapped_column(Float)
    mem_used_max: Mapped[int | None] = mapped_column(BigInteger)
    temp_avg: Mapped[float | None] = mapped_column(Float)
    temp_max: Mapped[float | None] = mapped_column(Float)
    power_avg: Mapped[float | None] = mapped_column(Float)
    power_max: Mapped[float | None] = mapped_column(Float)
    mem_used_avg: Mapped[float | None] = mapped_column(Float)
    util_samples: Mapped[int | None] = mapped_column(Integer)
    mem_used_samples: Mapped[int | None] = mapped_column(Integer)
    temp_samples: Mapped[int | None] = mapped_column(Integer)
    power_samples: Mapped[int | None] = mapped_column(Integer)


class GpuSampleMinute(GpuRollupColumns, Base):
    """Per-minute rollup of gpu_samples."""

    __tablename__ = "gpu_samples_1m"
    __table_args__ = (Index("ix_gpu_samples_1m_bucket_ts", "bucket_ts"),)


class GpuSampleFiveMinutes(GpuRollupColumns, Base):
    """Per-5-minute rollup of gpu_samples_1m (migration 0014), what long histories read:
    a fifth of the rows, and a fifth of the pages, of the minutes it sums."""

    __tablename__ = "gpu_samples_5m"
    __table_args__ = (Index("ix_gpu_samples_5m_bucket_ts", "bucket_ts"),)


class Task(Base):
    """A dispatched script: where it ran, how it ended, what it used."""

    __tablename__ = "tasks"
    __table_args__ = (
        Index("ix_tasks_state", "state"),
        Index("ix_tasks_submitted_at", "submitted_at"),
        Index("ix_tasks_group_id", "group_id"),
        CheckConstraint(_one_of("state", TASK_STATES), name="state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    script: Mapped[str] = mapped_column(Text)
    args_json: Mapped[str] = mapped_column(Text)
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id", ondelete="SET NULL"))
    state: Mapped[str] = mapped_column(String(16))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    gpus_requested: Mapped[int] = mapped_column(Integer)
    constraints_json: Mapped[str] = mapped_column(Text)
    priority: Mapped[int] = mapped_column(Integer)
    owner: Mapped[str] = mapped_column(String(255))
    remote_dir: Mapped[str | None] = mapped_column(Text)
    remote_pid: Mapped[int | None] = mapped_column(Integer)
    submitted_at: Mapped[int] = mapped_column(BigInteger)
    started_at: Mapped[int | None] = mapped_column(BigInteger)
    ended_at: Mapped[int | None] = mapped_column(BigInteger)
    error: Mapped[str | None] = mapped_column(Text)
    gpu_seconds: Mapped[float | None] = mapped_column(Float)
    peak_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    checked_at: Mapped[int | None] = mapped_column(BigInteger)
    # The task was stopped for running past its --timeout (state is then `failed`).
    timed_out: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # A member of a gang or an array: the group's id (its first member's task id), "gang" or
    # "array", and the member's rank or array index; all NULL for a lone task.
    group_id: Mapped[int | None] = mapped_column(Integer)
    group_kind: Mapped[str | None] = mapped_column(String(8))
    group_index: Mapped[int | None] = mapped_column(Integer)


class Allocation(Base):
    """A claim on one GPU by a task or an operator reservation; active while released_at is NULL.

    The partial unique index makes the database itself refuse a second active claim on a GPU.
    """

    __tablename__ = "allocations"
    __table_args__ = (
        Index(
            "uq_allocations_active_gpu",
            "gpu_id",
            unique=True,
            # PostgreSQL gets the same WHERE from the migrations (0001); a postgresql_where here
            # would import SQLAlchemy's PostgreSQL dialect in every process (~35 ms).
            sqlite_where=text("released_at IS NULL"),
        ),
        Index("ix_allocations_task_id", "task_id"),
        CheckConstraint(_one_of("kind", ALLOCATION_KINDS), name="kind"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"))
    task_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(String(16))
    owner: Mapped[str] = mapped_column(String(255))
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[int | None] = mapped_column(BigInteger)
    released_at: Mapped[int | None] = mapped_column(BigInteger)
    release_reason: Mapped[str | None] = mapped_column(Text)
    idle_since: Mapped[int | None] = mapped_column(BigInteger)  # below the idle thresholds


class Event(Base):
    """Something worth telling the operator: a state change, a health alarm, a task ending."""

    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_ts", "ts"),
        CheckConstraint(_one_of("severity", SEVERITIES), name="severity"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ts: Mapped[int] = mapped_column(BigInteger)
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id", ondelete="SET NULL"))
    gpu_id: Mapped[int | None] = mapped_column(ForeignKey("gpus.id", ondelete="SET NULL"))
    task_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text)
    data_json: Mapped[str | None] = mapped_column(Text)


class Candidate(Base):
    """A host seen by mDNS discovery; usable only once adopted."""

    __tablename__ = "candidates"
    __table_args__ = (
        UniqueConstraint("address", "port", "service_type"),
        CheckConstraint(_one_of("state", CANDIDATE_STATES), name="state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    address: Mapped[str] = mapped_column(String(255))
    port: Mapped[int] = mapped_column(Integer)
    service_type: Mapped[str] = mapped_column(String(64))
    server: Mapped[str | None] = mapped_column(String(255))
    txt_json: Mapped[str] = mapped_column(Text)
    gpu_count: Mapped[int | None] = mapped_column(Integer)
    gpu_model: Mapped[str | None] = mapped_column(String(255))
    session: Mapped[str | None] = mapped_column(String(255))
    first_seen: Mapped[int] = mapped_column(BigInteger)
    last_seen: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(16))
