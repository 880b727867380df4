"""Writes a run's results as a Markdown table (latest.md) and raw numbers (latest.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.bench.common import Figure, Measured, Results


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "ms":
        return f"{value:.2f} ms" if value < 10 else f"{value:.0f} ms"
    if value >= 1000:
        return f"{value:,.0f} {unit}"
    return f"{value:.3g} {unit}"


def _measured(measured: Measured, unit: str) -> str:
    text = f"{measured.label}: {_num(measured.median, unit)}"
    if measured.cpu_median is not None:
        text += f" (CPU {_num(measured.cpu_median, 's')})"
    return text


def _row(figure: Figure) -> str:
    fleet = "<br>".join(_measured(m, figure.unit)
                        for m in [figure.fleet, *figure.extra] if m is not None) or "—"
    peers = "<br>".join(_measured(p, figure.unit) for p in figure.peers) or "—"
    word = "×" if figure.better == "lower" else "× (peer/fleet)"
    ratios = "<br>".join(f"{v:.2f}{word} {k}" for k, v in figure.ratios().items()) or "—"
    verdict = figure.verdict or "—"
    cells = [figure.name, figure.compares, str(figure.runs), fleet, peers, ratios,
             figure.target or "—", verdict]
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def markdown(results: Results, run_info: dict[str, Any]) -> str:
    info = run_info["machine"]
    lines = [
        "# fleet benchmarks (latest run)",
        "",
        f"Date {run_info['date']}, {run_info['mode']} run, {run_info['elapsed_s']} s. "
        f"Machine: {info['nproc']} CPUs ({info['cpu_model']}), {info['memory']}, "
        f"Linux {info['kernel']}, Python {info['python']}. Load average before/after: "
        f"{run_info['load_average_before']} / {run_info['load_average_after']}.",
        "",
        "Ratios are fleet ÷ peer on the median wall time (below 1 = fleet faster / cheaper); for "
        "rates they are peer ÷ fleet. \"CPU\" is the median user+sys CPU of the controller-side "
        "process tree per run (robust against other load; host-side sshd CPU not included). "
        "Raw samples: latest.json. Regenerate: `make bench`.",
        "",
        "| figure | what it compares | runs | fleet (median) | peers (median) | ratio | target "
        "| where fleet stands |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row(figure) for figure in results.figures]
    notes = [f"- **{figure.name}** — {note}" for figure in results.figures
             for note in figure.notes]
    notes += [f"- {m.label}: {m.note}" for figure in results.figures
              for m in [figure.fleet, *figure.extra, *figure.peers]
              if m is not None and m.note]
    if notes:
        lines += ["", "## Notes", "", *dict.fromkeys(notes)]
    if results.notes:
        lines += ["", *[f"- {note}" for note in results.notes]]
    if results.skipped:
        lines += ["", "## Skipped", ""]
        lines += [f"- {what}: {why}" for what, why in results.skipped]
    return "\n".join(lines) + "\n"


def write_reports(results: Results, run_info: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path = out_dir / "latest.md"
    json_path = out_dir / "latest.json"
    md_path.write_text(markdown(results, run_info))
    json_path.write_text(json.dumps({
        **run_info,
        "figures": [figure.to_json() for figure in results.figures],
        "skipped": [{"what": what, "why": why} for what, why in results.skipped],
        "notes": results.notes,
    }, indent=2) + "\n")
    return md_path, json_path
