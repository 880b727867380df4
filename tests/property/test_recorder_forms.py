"""The monitor's cheap forms of what it records (facts keys, sample tuples) equal the full ones."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from db.samples import GPU_SAMPLE_FIELDS, HOST_SAMPLE_FIELDS
from db.types import GpuSampleIn, HostSampleIn
from fleet.recorder import facts_key, gpu_facts, gpu_sample, host_probe_facts, host_sample
from fleet.reports import GpuReport, HostReport, ProbeReport
from tests.property.test_parsers import PROPERTY_SETTINGS

# Few distinct values, so that equal and unequal facts both come up often.
names = st.sampled_from([None, "a", "b"])
sizes = st.sampled_from([None, 0, 80 * 2**30])
gpus = st.builds(
    GpuReport, index=st.integers(0, 2), uuid=names, name=names, pci_bus_id=names,
    memory_total_bytes=sizes, temperature_c=st.sampled_from([None, 40.0, 90.0]),
    utilization_gpu_pct=st.sampled_from([None, 0.0, 99.0]), fan_speed_pct=st.just(30.0),
    clock_mem_mhz=st.just(1593), ecc_errors_uncorrected=st.sampled_from([None, 2]),
    lost=st.booleans(),
)
hosts = st.builds(
    HostReport, hostname=names, kernel=names, driver_version=names, cuda_driver_version=names,
    cpu_count=st.sampled_from([None, 2, 64]), memory_total_bytes=sizes,
    load_1m=st.sampled_from([None, 0.5]), load_15m=st.sampled_from([None, 1.5]),
    net_tx_bytes=sizes,
)
reports = st.builds(
    ProbeReport, schema=st.just(1), timestamp=st.sampled_from([1.0, 2.0]), host=hosts,
    gpus=st.lists(gpus, max_size=2, unique_by=lambda gpu: gpu.index).map(tuple),
)


@PROPERTY_SETTINGS
@given(first=reports, second=reports)
def test_equal_keys_exactly_when_the_facts_are_equal(first: ProbeReport,
                                                     second: ProbeReport) -> None:
    same_facts = ((host_probe_facts(first), gpu_facts(first))
                  == (host_probe_facts(second), gpu_facts(second)))
    assert (facts_key(first) == facts_key(second)) == same_facts


@PROPERTY_SETTINGS
@given(report=reports)
def test_sample_tuples_hold_each_field_where_the_dataclass_has_it(report: ProbeReport) -> None:
    host = report.host
    assert host_sample(7, 1000, report) == HostSampleIn(
        host_id=7, ts=1000, load_1m=host.load_1m, load_5m=host.load_5m, load_15m=host.load_15m,
        cpu_busy_pct=host.cpu_busy_pct, memory_available_bytes=host.memory_available_bytes,
        disk_root_free_bytes=host.disk_root_free_bytes,
        disk_tasks_free_bytes=host.disk_tasks_free_bytes, net_rx_bytes=host.net_rx_bytes,
        net_tx_bytes=host.net_tx_bytes)
    assert len(HOST_SAMPLE_FIELDS) == 11 and len(GPU_SAMPLE_FIELDS) == 14
    for gpu in report.gpus:
        assert gpu_sample(9, 1000, gpu) == GpuSampleIn(
            gpu_id=9, ts=1000, utilization_gpu_pct=gpu.utilization_gpu_pct,
            utilization_memory_pct=gpu.utilization_memory_pct,
            memory_used_bytes=gpu.memory_used_bytes, temperature_c=gpu.temperature_c,
            power_draw_w=gpu.power_draw_w, fan_speed_pct=gpu.fan_speed_pct,
            performance_state=gpu.performance_state, clock_sm_mhz=gpu.clock_sm_mhz,
            clock_mem_mhz=gpu.clock_mem_mhz, ecc_errors_uncorrected=gpu.ecc_errors_uncorrected,
            process_count=len(gpu.processes), lost=gpu.lost)
