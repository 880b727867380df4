"""Writing probe outcomes to the database: host state and facts, GPU facts, samples, events."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from db.events import add_event
from db.gpus import set_gpu_state, upsert_gpus
from db.hosts import sync_hosts, update_host_probe_facts
from db.samples import record_samples
from db.sql import SqlWriter, writer_of
from db.types import GpuFacts, GpuSampleIn, HostFacts, HostProbeFacts, HostSampleIn, HostSource
from fleet.discovery import ADOPTED_SPEC_SOURCE
from fleet.fanout import HostStatus
from fleet.health.apply import record_host_outcome
from fleet.model import HostSpec
from fleet.monitor.clock import one_shot_time
from fleet.reports import GpuReport, ProbeReport

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

_Float = float | None
_Int = int | None
# HostSampleIn's and GpuSampleIn's fields, in order, as plain tuples (one per reading).
HostSampleRow = tuple[int, int, _Float, _Float, _Float, _Float, _Int, _Int, _Int, _Int, _Int]
GpuSampleRow = tuple[int, int, _Float, _Float, _Int, _Float, _Float, _Float, _Int, _Int, _Int,
                     _Int, int, bool]


def host_facts(spec: HostSpec, source: HostSource | None = None) -> HostFacts:
    """The database's view of a managed host (source: "adopted" for adopted hosts, else
    "inventory", unless given)."""
    if source is None:
        source = "adopted" if spec.source == ADOPTED_SPEC_SOURCE else "inventory"
    return HostFacts(
        name=spec.name, address=spec.address, port=spec.port, user=spec.user,
        connection=spec.connection, source=source, groups=spec.groups, labels=spec.labels,
    )


def record_statuses(target: Session | SqlWriter, statuses: Sequence[HostStatus],
                    now: float | None = None) -> None:
    """Store one fan-out's outcome in one transaction (committed by record_samples).

    Each host's state and event follow fleet.health.host_state's rule, the monitor's too: one
    probe decides (a failed `fleet status` has waited its whole timeout). A reading is stored
    at its own time, unless the host's clock is off the controller's by more than the
    monitor's tolerance: then at the time its reply arrived (fleet.monitor.clock.one_shot_time),
    so that the rollups, which close minutes on the controller's clock, see it.
    """
    writer = writer_of(target)
    moment = int(now if now is not None else time.time())
    host_ids = sync_hosts(writer, [host_facts(s.spec) for s in statuses], moment)
    host_samples: list[HostSampleIn] = []
    gpu_samples: list[GpuSampleIn] = []
    for status in statuses:
        host_id = host_ids[status.spec.name]
        record_host_outcome(writer, host_id, status.spec.name, status.state, status.reason,
                            now=moment)
        if status.report is not None:
            taken = one_shot_time(status.report.timestamp, status.finished_at)
            host_sample, samples = _record_report(writer, host_id, status.spec.name,
                                                  status.report, moment, int(taken * 1000))
            host_samples.append(host_sample)
            gpu_samples.extend(samples)
    record_samples(writer, host_samples, gpu_samples)


def _record_report(writer: SqlWriter, host_id: int, host_name: str, report: ProbeReport,
                   now: int, ts_ms: int) -> tuple[HostSampleIn, list[GpuSampleIn]]:
    gpu_ids = record_report_facts(writer, host_id, host_name, report, now)
    samples = []
    for gpu in report.gpus:
        gpu_id = gpu_ids[gpu.index]
        if gpu.lost:
            previous = set_gpu_state(writer, gpu_id, "lost")
            if previous != "lost":
                add_event(writer, ts=now, kind="gpu_lost", severity="error", host_id=host_id,
                          gpu_id=gpu_id, message=f"{host_name} GPU {gpu.index} lost: "
                          f"{gpu.error or 'NVML reports the GPU is lost'}")
        samples.append(gpu_sample(gpu_id, ts_ms, gpu))
    return host_sample(host_id, ts_ms, report), samples


def host_probe_facts(report: ProbeReport) -> HostProbeFacts:
    """The slow-changing host facts of a probe report (what the hosts table keeps)."""
    host = report.host
    return HostProbeFacts(
        hostname=host.hostname, kernel=host.kernel, driver_version=host.driver_version,
        cuda_driver_version=host.cuda_driver_version, cpu_count=host.cpu_count,
        memory_total_bytes=host.memory_total_bytes, gpu_count=len(report.gpus),
    )


def gpu_facts(report: ProbeReport) -> tuple[GpuFacts, ...]:
    """The slow-changing facts of every GPU in a probe report (what the gpus table keeps)."""
    return tuple(_gpu_facts(gpu) for gpu in report.gpus)


def facts_key(report: ProbeReport) -> tuple[object, ...]:
    """What host_probe_facts and gpu_facts take from a report, as one tuple: equal keys mean
    equal facts (a cheap comparison for the monitor, which sees the same facts every interval)."""
    host = report.host
    return (host.hostname, host.kernel, host.driver_version, host.cuda_driver_version,
            host.cpu_count, host.memory_total_bytes,
            *[(gpu.index, gpu.uuid, gpu.name, gpu.pci_bus_id, gpu.memory_total_bytes)
              for gpu in report.gpus])


def record_report_facts(target: Session | SqlWriter, host_id: int, host_name: str,
                        report: ProbeReport, now: int, *, events: bool = True) -> dict[int, int]:
    """Upsert a report's host and GPU facts; returns idx → gpu id.

    With `events`, each changed fact also becomes an event row (the monitor passes False: its
    health rules report fact changes themselves).
    """
    writer = writer_of(target)
    changed = update_host_probe_facts(writer, host_id, host_probe_facts(report), now)
    for field_name in ("gpu_count", "driver_version") if events else ():
        if field_name in changed and changed[field_name][0] is not None:
            old, new = changed[field_name]
            add_event(writer, ts=now, kind=f"{field_name}_changed", severity="warning",
                      host_id=host_id, message=f"{host_name}: {field_name} {old} -> {new}",
                      data={"from": old, "to": new})
    upsert = upsert_gpus(writer, host_id, list(gpu_facts(report)), now)
    for change in upsert.changes if events else ():
        if change.field != "added":
            add_event(writer, ts=now, kind="gpu_changed", severity="warning", host_id=host_id,
                      gpu_id=upsert.ids.get(change.idx),
                      message=f"{host_name} GPU {change.idx}: {change.field} "
                      f"{change.old} -> {change.new}",
                      data={"field": change.field, "from": change.old, "to": change.new})
    return upsert.ids


def host_sample(host_id: int, ts_ms: int, report: ProbeReport) -> HostSampleIn:
    """The host_samples row of a probe report."""
    return HostSampleIn(*host_sample_row(host_id, ts_ms, report))


def host_sample_row(host_id: int, ts_ms: int, report: ProbeReport) -> HostSampleRow:
    """host_sample as a tuple in HostSampleIn's field order (db.samples.record_sample_rows)."""
    host = report.host
    return (host_id, ts_ms, host.load_1m, host.load_5m, host.load_15m, host.cpu_busy_pct,
            host.memory_available_bytes, host.disk_root_free_bytes, host.disk_tasks_free_bytes,
            host.net_rx_bytes, host.net_tx_bytes)


def _gpu_facts(gpu: GpuReport) -> GpuFacts:
    return GpuFacts(idx=gpu.index, uuid=gpu.uuid, name=gpu.name, pci_bus_id=gpu.pci_bus_id,
                    memory_total_bytes=gpu.memory_total_bytes)


def gpu_sample(gpu_id: int, ts_ms: int, gpu: GpuReport) -> GpuSampleIn:
    """The gpu_samples row of one GPU of a probe report."""
    return GpuSampleIn(*gpu_sample_row(gpu_id, ts_ms, gpu))


def gpu_sample_row(gpu_id: int, ts_ms: int, gpu: GpuReport) -> GpuSampleRow:
    """gpu_sample as a tuple in GpuSampleIn's field order (db.samples.record_sample_rows)."""
    return (gpu_id, ts_ms, gpu.utilization_gpu_pct, gpu.utilization_memory_pct,
            gpu.memory_used_bytes, gpu.temperature_c, gpu.power_draw_w, gpu.fan_speed_pct,
            gpu.performance_state, gpu.clock_sm_mhz, gpu.clock_mem_mhz,
            gpu.ecc_errors_uncorrected, len(gpu.processes), gpu.lost)
