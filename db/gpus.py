"""GPU rows: recording what a probe found on a host, GPU state and drain, and the latest view."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from db.sql import RETURNING_ID, SqlReader, SqlWriter, writer_of
from db.types import GpuChange, GpuFacts, GpuReading, GpuState, GpuUpsert, LatestGpu

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db.models import Gpu, GpuSample

GPU_FACT_FIELDS = ("uuid", "name", "pci_bus_id", "memory_total_bytes")
INSERT_GPU = (
    f"INSERT INTO gpus (host_id, idx, state, drained, first_seen, last_seen, "
    f"{', '.join(GPU_FACT_FIELDS)}) VALUES (:host_id, :idx, 'ok', FALSE, :now, :now, "
    f"{', '.join(':' + name for name in GPU_FACT_FIELDS)})" + RETURNING_ID
)


def upsert_gpus(target: Session | SqlWriter, host_id: int, gpus: Sequence[GpuFacts],
                now: int) -> GpuUpsert:
    """Insert or update the GPUs a probe listed on `host_id`, matched by index.

    A None fact (unreadable this time) keeps the stored value. Returns idx → gpu id for the
    listed GPUs, the changed facts (and "added" for new indices), and stored indices the probe
    did not list (their rows and state are left for the health rules to judge).
    """
    writer = writer_of(target)
    stored = {row[0]: row for row in writer.rows(
        f"SELECT idx, id, {', '.join(GPU_FACT_FIELDS)} FROM gpus WHERE host_id = :host_id",
        {"host_id": host_id})}
    changes: list[GpuChange] = []
    ids: dict[int, int] = {}
    for facts in gpus:
        row = stored.get(facts.idx)
        if row is None:
            ids[facts.idx] = writer.insert(INSERT_GPU, {
                "host_id": host_id, "idx": facts.idx, "now": now,
                **{name: getattr(facts, name) for name in GPU_FACT_FIELDS}})
            changes.append(GpuChange(facts.idx, "added", None, facts.uuid))
            continue
        ids[facts.idx] = row[1]
        changed: dict[str, object] = {}
        for name, old in zip(GPU_FACT_FIELDS, row[2:], strict=True):
            new = getattr(facts, name)
            if new is not None and new != old:
                changed[name] = new
                if old is not None:
                    changes.append(GpuChange(facts.idx, name, old, new))
        assignments = ", ".join(f"{name} = :{name}" for name in (*changed, "last_seen"))
        writer.execute(f"UPDATE gpus SET {assignments} WHERE id = :id",
                       {**changed, "last_seen": now, "id": row[1]})
    listed = {facts.idx for facts in gpus}
    missing = tuple(sorted(idx for idx in stored if idx not in listed))
    return GpuUpsert(ids=ids, changes=tuple(changes), missing=missing)


def gpu_ids_of_hosts(reader: SqlReader, host_ids: Sequence[int]) -> dict[tuple[int, int], int]:
    """(host id, GPU index) → GPU id of every stored GPU of the hosts `host_ids`."""
    return {(host_id, idx): gpu_id for gpu_id, host_id, idx in reader.rows_in(
        "SELECT id, host_id, idx FROM gpus WHERE host_id IN ({values})", "host_id", host_ids)}


def set_gpu_state(target: Session | SqlWriter, gpu_id: int, state: GpuState) -> str:
    """Set a GPU's health state; returns the previous one. Raises LookupError for an unknown id."""
    writer = writer_of(target)
    previous = writer.first("SELECT state FROM gpus WHERE id = :id", {"id": gpu_id})
    if previous is None:
        raise LookupError(f"no GPU with id {gpu_id}")
    if previous[0] != state:
        writer.execute("UPDATE gpus SET state = :state WHERE id = :id",
                       {"state": state, "id": gpu_id})
    return str(previous[0])


def set_gpu_drained(session: Session, gpu_id: int, drained: bool, reason: str | None) -> None:
    """Drain (no new work placed) or undrain one GPU."""
    row = _gpu(session, gpu_id)
    row.drained = drained
    row.drain_reason = reason if drained else None


def _gpu(session: Session, gpu_id: int) -> Gpu:
    from db.models import Gpu

    row = session.get(Gpu, gpu_id)
    if row is None:
        raise LookupError(f"no GPU with id {gpu_id}")
    return row


def latest_gpus(session: Session, host_names: Sequence[str] | None = None) -> list[LatestGpu]:
    """Every GPU (of `host_names`, or of all hosts) with its newest sample, by host name and idx."""
    from sqlalchemy import select
    from sqlalchemy.orm import aliased

    from db.models import Gpu, GpuSample, Host

    newer = aliased(GpuSample)
    newest_sample_id = (
        select(newer.id)
        .where(newer.gpu_id == Gpu.id)
        .order_by(newer.ts.desc(), newer.id.desc())
        .limit(1)
        .correlate(Gpu)
        .scalar_subquery()
    )
    query = (
        select(Gpu, Host.name, GpuSample)
        .join(Host, Host.id == Gpu.host_id)
        .outerjoin(GpuSample, GpuSample.id == newest_sample_id)
        .order_by(Host.name, Gpu.idx)
    )
    if host_names is not None:
        query = query.where(Host.name.in_(list(host_names)))
    result: list[LatestGpu] = []
    for gpu, host_name, sample in session.execute(query):
        result.append(
            LatestGpu(
                host=host_name,
                host_id=gpu.host_id,
                gpu_id=gpu.id,
                idx=gpu.idx,
                uuid=gpu.uuid,
                name=gpu.name,
                pci_bus_id=gpu.pci_bus_id,
                memory_total_bytes=gpu.memory_total_bytes,
                state=gpu.state,
                drained=gpu.drained,
                drain_reason=gpu.drain_reason,
                latest=None if sample is None else _reading(sample),
            )
        )
    return result


def _reading(sample: GpuSample) -> GpuReading:
    return GpuReading(
        ts=sample.ts,
        utilization_gpu_pct=sample.utilization_gpu_pct,
        utilization_memory_pct=sample.utilization_memory_pct,
        memory_used_bytes=sample.memory_used_bytes,
        temperature_c=sample.temperature_c,
        power_draw_w=sample.power_draw_w,
        fan_speed_pct=sample.fan_speed_pct,
        performance_state=sample.performance_state,
        clock_sm_mhz=sample.clock_sm_mhz,
        clock_mem_mhz=sample.clock_mem_mhz,
        ecc_errors_uncorrected=sample.ecc_errors_uncorrected,
        process_count=sample.process_count,
        lost=sample.lost,
    )
