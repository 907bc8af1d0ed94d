"""Render a `Report` as report.json, report.md and report.html (with plots), and as the CLI's summary.

Everything here reads the report `accel.bench.summary` computed, so no output says anything report.json does
not hold.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..io import strict_json, write_atomic
from ..measure.flops import mfu_percent
from ..measure.load import busy_note
from . import plots
from .records import Reading, Report, VariantSummary, Verdict
from .rev_compare import revision_lines
from .variants import format_value

SAY = {
    Verdict.HELPED: "helped",
    Verdict.NO_EFFECT: "no measurable effect",
    Verdict.HURT: "hurt",
    Verdict.MIXED: "mixed",
    None: "n/a",
}


# each variant's FLOP/s over the peak of the dtype it computes in: a bf16 variant's over the bf16 peak, several
# times the fp32 one where the CPU or GPU has bf16 units, so MFUs of two dtypes do not compare (samples/s does)
MFU = "MFU (of its dtype's peak)"
GRAIN_SAID = 0.02  # the evaluations' spacing is said from this share of the time to the target (finer: no matter)


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def say(verdict: Verdict | None, busy: float | None = None, undecided: float | None = None) -> str:
    """A verdict in words; one withheld because the machine was busy (`busy`: others' share) says so, and so does
    one whose interval could not decide at the resolution asked (`undecided`: that resolution)."""
    if busy is not None:
        return f"inconclusive: busy machine (others took {busy:.0%} of the cores)"
    if verdict is None and undecided:
        return f"undecided at +-{undecided:.0%}"
    return SAY[verdict]


def _reading(reading: Reading | None) -> str:
    if reading is None or reading.median is None:
        return "no successful trials"
    need = f" (about {reading.trials_needed} trials a side would decide)" if reading.trials_needed else ""
    return f"{say(reading.verdict, reading.busy, reading.undecided)}, {reading.text()}{need}"


def _target_cell(r: VariantSummary, target: str | None, is_base: bool) -> list[str]:
    if not target:
        return []
    if not r.target_reached:
        return ["never reached"]
    ratio = r.time_to_target_ratio
    said = f", {ratio.text()} the baseline's" if ratio and ratio.median is not None and not is_base else ""
    return [f"{r.time_to_target_s:.1f} ({r.target_reached}/{r.ok_trials} trials){said}"]


def _row(r: VariantSummary, is_base: bool, target: str | None, shown: dict[str, bool]) -> list[str]:
    flags = (["results changed"] if r.result_changed else []) + ([f"{r.errors} failed"] if r.errors else [])
    flags += ["refused, not run"] if r.refused else []
    flags += [r.unsteady_said] if r.unsteady else []
    return [
        r.name,
        r.samples_per_s.text("{:.1f}", "") + _tokens(r),
        r.ratio_vs_baseline.text(),
        r.median_step_ratio.text(),
        "baseline" if is_base else "refused" if r.refused else say(r.verdict, r.busy, r.undecided),
        _step_ms(r),
        "n/a" if r.mfu is None else mfu_percent(r.mfu) + (f" {r.mfu_of}" if r.mfu_of else ""),
        _f(r.data_wait_fraction, "{:.0%}"),
        _f(r.peak_memory_mb, "{:.0f}"),
        _f(r.first_step_s, "{:.2f}"),
        *([_f(r.build_s, "{:.1f}")] if shown["start-up s"] else []),
        *([_f(r.compile_s, "{:.1f}")] if shown["compile s"] else []),
        *([f"{_f(r.eval_s, '{:.1f}')} / {_f(r.save_s, '{:.1f}')}"] if shown["eval / save s"] else []),
        "" if is_base else _f(r.break_even_steps, "{:.0f}"),
        _f(r.final_loss, "{:.4f}"),
        _f(r.val_metric, "{:.4f}"),
        *_target_cell(r, target, is_base),
        "; ".join(flags),
    ]


def table(report: Report) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the ranked table (fastest median samples/s first, failed variants last)."""
    header = [
        "variant",
        "samples/s [95% CI]",
        "ratio [95% CI]",
        "median-step ratio",
        "verdict vs baseline",
        "step p50/p90 ms",
        MFU,
        "data wait",
        "peak MB",
        "first step s",
    ]
    # the one-off costs, each a column only where a variant has it: compilation, and a script's evaluations and
    # checkpoint writes in its trials (a report from before start-up was summarised has none)
    shown = {
        "start-up s": any(r.build_s is not None for r in report.variants),
        "compile s": any(r.compile_s is not None for r in report.variants),
        # shown to a tenth of a second: a column of 0.0 / 0.0 would say nothing
        "eval / save s": any(max(r.eval_s or 0.0, r.save_s or 0.0) >= 0.05 for r in report.variants),
    }
    header += [name for name, show in shown.items() if show]
    header += ["break-even steps", "final loss", _metric_name(report)]
    target = report.settings.target if report.settings else None
    header += [f"time to {target} s"] if target else []
    ranked = sorted(report.variants, key=lambda r: -(r.samples_per_s.median or -math.inf))
    return header + ["flag"], [_row(r, r.name == report.baseline, target, shown) for r in ranked]


def _tokens(r: VariantSummary) -> str:
    return f" ({r.tokens_per_s:.0f} tokens/s)" if r.tokens_per_s else ""


def _metric_name(report: Report) -> str:
    return next((r.val_metric_name for r in report.variants if r.val_metric_name), "val metric")


def _step_ms(r: VariantSummary) -> str:
    p50, p90 = r.step_time_p50_s, r.step_time_p90_s
    return "n/a" if p50 is None else f"{p50 * 1000:.1f}/{p90 * 1000:.1f}"


def verdict_lines(report: Report) -> list[str]:
    """Plain-language verdicts: one per speed-up for an ablation, one per non-baseline variant otherwise; then
    which variants' trials ran at two speeds, and how coarsely the evaluations read the times to a target, which
    every verdict read from them rests on."""
    grain = grain_line(report.grain, "baseline")
    return _verdicts(report) + _unsteady(report) + ([grain] if grain else [])


def grain_line(grain: float | None, reference: str) -> str | None:
    """Said when the evaluations that read the times to a target lie GRAIN_SAID or more of the time apart."""
    if grain is None or grain < GRAIN_SAID:
        return None
    return (
        f"Times to the target are read at the run's own evaluations, {grain:.0%} of the {reference}'s time to it "
        "apart: a time ratio moves in steps about that size and a smaller difference is not seen (evaluating "
        "more often would see it)."
    )


def _unsteady(report: Report) -> list[str]:
    rows = [r for r in report.variants if r.unsteady]
    if not rows:
        return []
    said = ", ".join(f"{r.name} {r.unsteady_range}" for r in rows)
    return [
        f"Unsteady trials ({said} samples/s, slowest to fastest): each interval spans two speeds, so a verdict "
        "read from them is weak; find what differed between the slow and the fast trials (a cold cache, a "
        "worker pool still starting, a neighbour) or run more --trials."
    ]


def _verdicts(report: Report) -> list[str]:
    if report.speedups:
        rows = report.by_name
        refused_all = rows["all"].refused if "all" in rows else None
        lines = (
            [f"all: refused, not run, so each speed-up is read added to baseline only: {refused_all}"]
            if refused_all
            else []
        )
        for name, s in report.speedups.items():
            busy = [x.busy for x in (s.added, s.removed) if x is not None and x.busy is not None]
            wide = [x.undecided for x in (s.added, s.removed) if x is not None and x.undecided]
            said = say(s.verdict, max(busy, default=None), max(wide, default=None))
            line = f"{name}: {said}. Added to baseline: {_reading(s.added)}"
            if f"-{name}" in rows and not refused_all:
                line += f"; removed from all (all vs -{name}): {_reading(s.removed)}"
            failed = sum(rows[n].errors for n in (f"+{name}", f"-{name}") if n in rows)
            refused = [
                f"{n} refused, not run: {rows[n].refused}"
                for n in (f"+{name}", f"-{name}")
                if n in rows and rows[n].refused
            ]
            lines.append(
                line + "." + (f" {failed} of its trials failed." if failed else "") + "".join(f" {r}." for r in refused)
            )
        return lines
    return [
        f"{r.name}: refused, not run: {r.refused}"
        if r.refused
        else f"{r.name}: {_reading(r.ratio_reading)} vs baseline"
        + _steady_disagrees(r)
        + (" (results changed)" if r.result_changed else "")
        for r in report.variants
        if r.name != report.baseline
    ]


def _steady_disagrees(r: VariantSummary) -> str:
    """The median-step reading, when its verdict differs from the mean's: stalls (or a cost that hits only some
    steps) decided one of them, and the reader should know."""
    if r.median_step_ratio.median is None or r.median_step_verdict in (None, r.verdict):
        return ""
    return f"; by median step times {_reading(r.median_step_reading)}"


def failed_lines(report: Report) -> list[str]:
    """'variant trial N: message' for each failed trial (a traceback's exception message, whole)."""
    out = []
    for r in report.variants:
        for t in r.trials:
            if t.ok:
                continue
            out.append(f"{r.name} trial {t.trial}: {t.error_said()}")
    return out


def outputs_lines(report: Report) -> list[str]:
    """What the script made under its own output options in the trials, each trial's in a folder of its own."""
    made: dict[str, list[dict[str, Any]]] = {}
    for t in (t for r in report.variants for t in r.trials):
        for option, counted in (t.script_outputs or {}).items():
            made.setdefault(option, []).append(counted)
    return [
        f"The script made {_many(sum(c['folders'] for c in counts), 'folder')} and "
        f"{_many(sum(c['files'] for c in counts), 'file')} under its {option} in {_many(len(counts), 'trial')}: "
        f"each trial's in a folder of its own, removed with it, not in {counts[0]['given']}."
        for option, counts in made.items()
    ]


def _many(n: int, thing: str) -> str:
    return f"{n} {thing}{'' if n == 1 else 's'}"


def lint_lines(report: Report) -> list[str]:
    """Each speed-lint finding once, with the variants it was found in, and, for one the baseline has, what this
    bench measured of the variants that ran without it: a fix the bench found slower is said beside the advice."""
    found: dict[str, tuple[dict, list[str]]] = {}
    for r in report.variants:
        for f in r.lint:
            found.setdefault(f["code"], (f, []))[1].append(r.name)
    return [
        f"{f['found']} Fix: {f['fix']} ({', '.join(names)}){_measured_without(report, names)}"
        for f, names in found.values()
    ]


def _measured_without(report: Report, found_in: list[str]) -> str:
    if report.baseline not in found_in:
        return ""
    without = [r for r in report.variants if r.name not in found_in and not r.refused and r.trials]
    said = "; ".join(f"{r.name} {_reading(r.ratio_reading)} vs {report.baseline}" for r in without)
    return f". Measured here without it: {said}." if said else ""


def busy_line(report: Report) -> str | None:
    """The warning that the machine was busy during the trials (accel/measure/load.py's rule), or None."""
    return busy_note([t.load for r in report.variants for t in r.trials])


def _busy(report: Report) -> list[str]:
    note = busy_line(report)
    return [f"**Busy machine.** {note}", ""] if note else []


def _interrupted(report: Report) -> list[str]:
    if report.stopped:
        return [f"**Stopped.** {report.stopped}", ""]
    if not report.interrupted:
        return []
    done = sum(len(r.trials) for r in report.variants)
    planned = report.trials_planned if report.trials_planned is not None else "?"
    return [
        f"**Interrupted** after {done} of {planned} trials: the figures below cover the finished trials "
        "only, and nothing is recommended.",
        "",
    ]


def _results(report: Report) -> list[str]:
    """The ranked table, verdicts, recommendation, lint and failed trials."""
    header, rows = table(report)
    said = revision_lines(report)
    out = ["## Revisions", "", *[f"- {ln}" for ln in said], ""] if said else []
    out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out += ["", "## Verdicts", ""] + [f"- {ln}" for ln in verdict_lines(report)]
    out += ["", "## Recommended configuration", "", report.recommended.text, *_run_with(report)]
    outputs = outputs_lines(report)
    if outputs:
        out += ["", "## The script's own outputs", ""] + [f"- {ln}" for ln in outputs]
    lint = lint_lines(report)
    if lint:
        out += ["", "## Speed lint", ""] + [f"- {ln}" for ln in lint]
    failed = failed_lines(report)
    if failed:
        out += ["", "## Failed trials", ""] + [f"- {ln}" for ln in failed]
    return out


def _run_with(report: Report) -> list[str]:
    """The line that runs the recommendation, and the run length it was weighed for."""
    if not report.recommended.run_with:
        return []
    settings = report.settings
    length = ""
    if settings is not None and settings.run_steps:
        length = f"For a run of {settings.run_steps:,} optimizer steps ({settings.run_steps_from}). "
    return ["", f"{length}Run with: `{report.recommended.run_with}`"]


def _baseline(report: Report) -> list[str]:
    return [f"Baseline: `{report.baseline}`. Ranked by median samples/s.", ""]


def summary_text(report: Report) -> str:
    """What `accel bench` prints: report.md from the table on (from the interruption note, when there is one)."""
    lines = _interrupted(report) + _baseline(report) if report.interrupted else []
    return "\n".join(_busy(report) + lines + _results(report) + _files(report))


def render_markdown(report: Report) -> str:
    """report.md: title, command/env, ranked table, verdicts, recommended configuration, failed trials."""
    out = ["# accel bench report", ""]
    if report.command:
        out.append(f"Command: `{report.command}`  ")
    if report.env:
        out.append("Environment: " + ", ".join(f"{k}={format_value(v)}" for k, v in report.env.items()))
    out += _window(report) + _forked(report) + _files(report) + [""]
    out += _busy(report) + _interrupted(report) + _baseline(report) + _results(report)
    return "\n".join(out) + "\n"


def _files(report: Report) -> list[str]:
    """What kept the user's files from the script's trials (accel/bench/isolation.py): "isolated", "restored 3
    files"."""
    return [f"Your files: {report.files} (docs/bench.md, a trial never changes your files)."] if report.files else []


def _forked(report: Report) -> list[str]:
    """Which of a script's trials were forked from their variant's zygote (accel/bench/zygotes.py)."""
    trials = [t for v in report.variants for t in v.trials]
    imports = [t.forked_s for t in trials if t.forked_s is not None]
    if not imports:
        return []
    fresh = "" if len(imports) == len(trials) else "; the others started as fresh processes"
    return [
        f"Trials: {len(imports)} of {len(trials)} forked from their variant's zygote, a process that imported the "
        f"script's libraries once ({min(imports):.1f}-{max(imports):.1f} s, left out of their start-up){fresh}."
    ]


def _window(report: Report) -> list[str]:
    """How long each trial's timed window was, where it was chosen by time (--window)."""
    settings = report.settings
    if settings is None or not settings.window_s:
        return []
    return [
        f"Timed window: at least {settings.steps} steps and {settings.window_s:g} s of steps per trial, after "
        f"{settings.warmup} warm-up steps and the leading one-off steps (counted as warm-up)."
    ]


def write_reports(report: Report, out_dir: Path) -> dict[str, Path]:
    """Write report.json, report.md and report.html (with PNG plots) into `out_dir`; returns their paths.

    JSON and Markdown are written first, so a plotting failure cannot lose the numbers.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md"}
    write_atomic(paths["json"], strict_json(report.to_data(), indent=2) + "\n")
    paths["md"].write_text(render_markdown(report))
    notes = (
        revision_lines(report)
        + verdict_lines(report)
        + ["Recommended configuration: " + report.recommended.text, *_run_with(report)[1:]]
        + outputs_lines(report)
    )
    paths["html"] = plots.write_html(report, out_dir, table(report), notes, failed_lines(report), busy_line(report))
    return paths
