"""A profiled window as profile.json, profile.md and profile.html (with the anatomy's stacked bar), the Chrome
trace beside them. Everything is rendered from the report dict that profile.json holds."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from ..bench.plots import _figure, _html_list, _html_table, _save, embedded_png, html_page
from ..devices import environment
from ..io import strict_json, write_atomic
from ..measure.load import busy_note
from . import phases
from .advice import advise
from .gpu import gpu_view
from .table import by_module, matmul_share, op_rows
from .trace import write_trace
from .window import Profiled

ANATOMY_PNG = "anatomy.png"


def build(
    profiled: Profiled,
    folder: Path,
    command: str,
    recipe: str | list[str],
    rows: int = 15,
    overrides: list[str] = (),
) -> dict[str, Any]:
    """Write the trace and gather the report (not yet written: `write` does); `recipe`: the recipe's path, or the
    script's command line (accel.profile.advice)."""
    trace = write_trace(profiled, folder)
    report = {
        "command": command,
        "device": str(profiled.device),
        "steps": profiled.steps,
        "steps_planned": profiled.planned,
        "status": profiled.status,
        "diverged_at_step": profiled.diverged_at,
        "anatomy": phases.anatomy(profiled.segments, profiled.boundaries, profiled.cuda),
        "gpu": gpu_view(profiled),
        "matmul_share": matmul_share(profiled),
        "modules": by_module(profiled, rows),
        "ops": op_rows(profiled, rows),
        "facts": profiled.facts,
        "trace": trace.name,
        "trace_mb": trace.stat().st_size / 1e6,
        "memory_snapshot": profiled.snapshot.name if profiled.snapshot else None,
        "env": environment(profiled.device),
        "load": profiled.load,
        "busy": busy_note([profiled.load], "profiled windows"),
    }
    report["advice"] = advise(report, recipe, overrides, folder)
    return report


def write(report: dict[str, Any], folder: Path) -> None:
    write_atomic(folder / "profile.json", strict_json(report, indent=1) + "\n")
    write_atomic(folder / "profile.md", markdown(report))
    write_atomic(folder / "profile.html", page(report, folder))


def anatomy_table(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    memory = report["anatomy"]["memory"]
    rows = [
        [row["phase"], f"{row['ms_per_step']:.1f}", f"{row['share']:.1%}", _mb(row["peak_mb"])]
        for row in report["anatomy"]["phases"]
    ]
    steps = report["anatomy"]["step_ms"]
    rows.append(["step (measured)", f"{sum(steps) / len(steps):.1f}", "100%", ""])
    return ["phase", "ms/step", "share", f"peak MB ({memory})"], rows


def modules_table(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    rows = [
        [row["op"], f"{row['ms_per_step']:.1f}", f"{row['share']:.1%}", ", ".join(row["top"])]
        for row in report["modules"]
    ]
    return ["module (or phase)", "ms/step", "share", "top ops"], rows


def ops_table(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    clock, rows = next(iter(report["ops"].items()))
    return [f"op ({clock})", "ms/step", "share"], [
        [row["op"], f"{row['ms_per_step']:.2f}", f"{row['share']:.1%}"] for row in rows[:-1]
    ]


def findings(report: dict[str, Any]) -> list[str]:
    if not report["advice"]:
        top = sorted(report["anatomy"]["phases"], key=lambda row: row["share"], reverse=True)[:2]
        spent = " and ".join(f"{row['phase']} {row['share']:.0%}" for row in top)
        return [f"No finding: the step is {spent}, none of it a known trap. The operator tables say where it goes."]
    return [
        f"{a['finding']}. Worth trying: {a['fix']}."
        + (f" Test it: `{a['bench']}`" if a["bench"] else "")
        + (f" Already measured: {a['measured']}." if a.get("measured") else "")
        for a in report["advice"]
    ]


def status_line(report: dict[str, Any]) -> str | None:
    """How the profiled run ended, when it did not complete: said first, since it changes what the figures mean."""
    status, planned = report.get("status", "completed"), report.get("steps_planned") or report["steps"]
    if status in ("interrupted", "preempted"):
        return (
            f"INTERRUPTED: a signal stopped the run after {report['steps']} of its {planned} profiled steps; the "
            "figures cover those steps only."
        )
    if status == "diverged":
        return (
            f"DIVERGED: the loss became NaN or infinite at step {report.get('diverged_at_step')}, so these steps "
            "computed with non-finite numbers (`accel train` of this recipe exits 3). Make the run stable first "
            "(a lower learning rate, train.clip_grad_norm), then profile it."
        )
    return None


def summary_lines(report: dict[str, Any], status: bool = True) -> list[str]:
    ended = status_line(report) if status else None
    lines = [ended] if ended else []
    lines += [f"BUSY MACHINE: {report['busy']}"] if report.get("busy") else []
    planned = report.get("steps_planned") or report["steps"]
    of = f" of {planned}" if planned != report["steps"] else ""
    lines.append(f"Profiled {report['steps']}{of} steps on {report['device']}; ")
    lines[-1] += f"matmul/convolution: {report['matmul_share']:.0%} of op time"
    gpu = report["gpu"]
    if gpu:
        lines.append(
            f"GPU idle {gpu['idle_fraction']:.0%} of the steps; per step {gpu['kernel_ms_per_step']:.1f} ms of "
            f"kernels, {gpu['memcpy_ms_per_step']:.1f} ms of copies, {gpu['collective_ms_per_step']:.1f} ms of "
            "collectives"
        )
    lines.append(f"Trace: {report['trace']} ({report['trace_mb']:.2f} MB), opens in https://ui.perfetto.dev")
    if report["memory_snapshot"]:
        lines.append(f"Memory snapshot: {report['memory_snapshot']}, opens in https://pytorch.org/memory_viz")
    return lines


def markdown(report: dict[str, Any]) -> str:
    parts = [f"# accel profile\n\nCommand: `{report['command']}`\n", *[f"- {line}" for line in summary_lines(report)]]
    parts += ["\n## Advice\n", *[f"- {line}" for line in findings(report)]]
    for title, table in (
        ("The step's anatomy", anatomy_table(report)),
        ("Top operators by module", modules_table(report)),
        ("Top operators", ops_table(report)),
    ):
        parts += [f"\n## {title}\n", _md_table(table)]
    return "\n".join(parts) + "\n"


def page(report: dict[str, Any], folder: Path) -> str:
    png = plot_anatomy(report, folder / ANATOMY_PNG)
    parts = [
        "<h1>accel profile</h1>",
        f"<p>Command: <code>{html.escape(report['command'])}</code></p>",
        _html_list(summary_lines(report)),
        "<h2>Advice</h2>",
        _html_list(findings(report)),
        "<h2>The step's anatomy</h2>",
        f"<p>{embedded_png(png, 'anatomy')}</p>",
        _html_table(anatomy_table(report)),
        "<h2>Top operators by module</h2>",
        _html_table(modules_table(report)),
        "<h2>Top operators</h2>",
        _html_table(ops_table(report)),
    ]
    return html_page("accel profile", parts)


def plot_anatomy(report: dict[str, Any], path: Path) -> Path:
    """One bar per profiled step, stacked by phase (ms), so a slow step shows which phase made it slow."""
    steps = report["anatomy"]["step_ms"]
    fig, ax = _figure(len(steps))
    names = [f"step {i + 1}" for i in range(len(steps))]
    bottom = [0.0] * len(steps)
    for row in report["anatomy"]["phases"]:
        ax.bar(names, row["per_step_ms"], bottom=bottom, label=row["phase"])
        bottom = [b + h for b, h in zip(bottom, row["per_step_ms"])]
    ax.plot(names, steps, "k_", markersize=30, label="measured step")
    ax.set_ylabel("ms")
    ax.set_title("Where each profiled step's time goes")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def _mb(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"


def _md_table(table: tuple[list[str], list[list[str]]]) -> str:
    header, rows = table
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows])


def print_report(report: dict[str, Any], folder: Path) -> None:
    """What the CLI prints: how the run ended if it did not complete, the anatomy, the top modules, the advice,
    and where the files are."""
    ended = status_line(report)
    if ended:
        print(ended + "\n")
    print(phases.render(report["anatomy"]))
    print()
    for row in report["modules"][:8]:
        print(f"{row['op'][:28]:<28} {row['ms_per_step']:>9.1f} {row['share']:>7.1%}  {', '.join(row['top'])}")
    print()
    for line in [*findings(report), *summary_lines(report, status=False)]:
        print(line)
    print(f"{folder / 'profile.html'}")
