"""`fleet usage` output: a table, CSV, or the JSON document, from one list of fields."""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleet.services.usage import UsageReport, UsageRow

# (field, table header, alignment): the CSV's and JSON's names, in this order.
FIELDS = (("key", "KEY", "<"), ("gpu_hours", "GPU-H", ">"),
          ("task_gpu_hours", "TASK GPU-H", ">"), ("reserved_gpu_hours", "RESERVED GPU-H", ">"),
          ("busy_gpu_hours", "BUSY GPU-H", ">"), ("efficiency", "EFFICIENCY", ">"),
          ("tasks", "TASKS", ">"), ("failures", "FAILED", ">"),
          ("median_wait_s", "MEDIAN WAIT", ">"), ("reservations", "RESERVATIONS", ">"),
          ("reservation_use", "RESERVATION USE", ">"))


def usage_fields(row: UsageRow) -> dict[str, Any]:
    """One row's figures by field name (hours to 3 decimals, ratios to 4)."""
    def hours(value: float) -> float:
        return round(value, 3)

    def ratio(value: float | None) -> float | None:
        return None if value is None else round(value, 4)

    return {"key": row.key, "gpu_hours": hours(row.gpu_hours),
            "task_gpu_hours": hours(row.task_gpu_hours),
            "reserved_gpu_hours": hours(row.reserved_gpu_hours),
            "busy_gpu_hours": hours(row.busy_gpu_hours), "efficiency": ratio(row.efficiency),
            "tasks": row.tasks, "failures": row.failures,
            "median_wait_s": None if row.median_wait_s is None else round(row.median_wait_s, 1),
            "reservations": row.reservations, "reservation_use": ratio(row.reservation_use)}


def usage_json(report: UsageReport) -> dict[str, Any]:
    """The `--json` document."""
    return {"since": report.since, "until": report.until, "by": report.by,
            "usage": [usage_fields(row) for row in report.rows]}


def usage_csv(report: UsageReport) -> str:
    """A header line, then one line per row (empty cells for no value)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([name for name, _, _ in FIELDS])
    for row in report.rows:
        fields = usage_fields(row)
        writer.writerow(["" if fields[name] is None else fields[name] for name, _, _ in FIELDS])
    return buffer.getvalue()


def usage_table(report: UsageReport) -> str:
    """Aligned columns; a percentage for the ratios, minutes for the wait."""
    from fleet.render.table import Column, render_table

    if not report.rows:
        return "no GPU was held and no task submitted in that time range"
    columns = [Column(header.replace("KEY", report.by.upper()), align)
               for _, header, align in FIELDS]

    def percent(value: float | None) -> str | None:
        return None if value is None else f"{value:.0%}"

    def wait(seconds: float | None) -> str | None:
        return None if seconds is None else f"{seconds / 60:.1f} min" if seconds >= 60 \
            else f"{seconds:.0f} s"

    return render_table(columns, [
        [row.key, f"{row.gpu_hours:.2f}", f"{row.task_gpu_hours:.2f}",
         f"{row.reserved_gpu_hours:.2f}", f"{row.busy_gpu_hours:.2f}", percent(row.efficiency),
         row.tasks, row.failures, wait(row.median_wait_s), row.reservations,
         percent(row.reservation_use)] for row in report.rows])
