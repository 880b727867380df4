"""GPU rows: recording what a probe found on a host, GPU state and drain, and the latest view."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from db.models import Gpu, GpuSample, Host
from db.types import GpuChange, GpuFacts, GpuReading, GpuState, GpuUpsert, LatestGpu

GPU_FACT_FIELDS = ("uuid", "name", "pci_bus_id", "memory_total_bytes")


def upsert_gpus(session: Session, host_id: int, gpus: Sequence[GpuFacts], now: int) -> GpuUpsert:
    """Insert or update the GPUs a probe listed on `host_id`, matched by index.

    A None fact (unreadable this time) keeps the stored value. Returns idx → gpu id for the
    listed GPUs, the changed facts (and "added" for new indices), and stored indices the probe
    did not list (their rows and state are left for the health rules to judge).
    """
    stored = {gpu.idx: gpu for gpu in session.scalars(select(Gpu).where(Gpu.host_id == host_id))}
    changes: list[GpuChange] = []
    rows: dict[int, Gpu] = {}
    for facts in gpus:
        row = stored.get(facts.idx)
        if row is None:
            row = Gpu(
                host_id=host_id,
                idx=facts.idx,
                state="ok",
                drained=False,
                first_seen=now,
                last_seen=now,
            )
            for name in GPU_FACT_FIELDS:
                setattr(row, name, getattr(facts, name))
            session.add(row)
            changes.append(GpuChange(facts.idx, "added", None, facts.uuid))
        else:
            for name in GPU_FACT_FIELDS:
                new = getattr(facts, name)
                old = getattr(row, name)
                if new is not None and new != old:
                    setattr(row, name, new)
                    if old is not None:
                        changes.append(GpuChange(facts.idx, name, old, new))
            row.last_seen = now
        rows[facts.idx] = row
    session.flush()
    listed = {facts.idx for facts in gpus}
    missing = tuple(sorted(idx for idx in stored if idx not in listed))
    return GpuUpsert(
        ids={idx: row.id for idx, row in rows.items()}, changes=tuple(changes), missing=missing
    )


def set_gpu_state(session: Session, gpu_id: int, state: GpuState) -> str:
    """Set a GPU's health state; returns the previous one. Raises LookupError for an unknown id."""
    row = _gpu(session, gpu_id)
    previous = row.state
    row.state = state
    return previous


def set_gpu_drained(session: Session, gpu_id: int, drained: bool, reason: str | None) -> None:
    """Drain (no new work placed) or undrain one GPU."""
    row = _gpu(session, gpu_id)
    row.drained = drained
    row.drain_reason = reason if drained else None


def _gpu(session: Session, gpu_id: int) -> Gpu:
    row = session.get(Gpu, gpu_id)
    if row is None:
        raise LookupError(f"no GPU with id {gpu_id}")
    return row


def latest_gpus(session: Session, host_names: Sequence[str] | None = None) -> list[LatestGpu]:
    """Every GPU (of `host_names`, or of all hosts) with its newest sample, by host name and idx."""
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
