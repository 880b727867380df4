"""The overview marks processes fleet did not start: `⚠USER` on the GPU row (after its holder,
if any) and a count on the host row."""

from __future__ import annotations

from fleet.model import HostSpec
from fleet.reports import GpuReport, ProcessInfo
from fleet.snapshot import AllocationInfo, GpuSnapshot, HostSnapshot
from tui.rows import allocation_label, host_cells

STRAY = ProcessInfo(4242, 1 << 30, "python", uid=1001, user="bob", session=7)


def _gpu(index: int, holder: AllocationInfo | None = None,
         unmanaged: tuple[ProcessInfo, ...] = ()) -> GpuSnapshot:
    return GpuSnapshot("h", index, GpuReport(index=index, processes=unmanaged),
                       allocation=holder, unmanaged=unmanaged)


def test_gpu_rows_flag_unmanaged_users_and_host_rows_count_them() -> None:
    assert allocation_label(_gpu(0)) == "–"
    assert allocation_label(_gpu(0, unmanaged=(STRAY,))) == "⚠bob"
    reserved = AllocationInfo(1, "reservation", "ann")
    assert allocation_label(_gpu(1, reserved, (STRAY,))) == "rsv ann ⚠bob"
    host = HostSnapshot(HostSpec("h", "10.0.0.1"), "up",
                        gpus=(_gpu(0, unmanaged=(STRAY,)), _gpu(1, reserved, (STRAY,)), _gpu(2)))
    assert "1 rsv ⚠2" in [str(cell) for cell in host_cells(host, False, 0.0)]
