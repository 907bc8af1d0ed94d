"""Turn raw bench trials into the report dict (DESIGN.md section 6) and write report.json / .md / .html.

`summarize` is pure: trials in, report dict out; `write_reports` only renders it, so report.md and report.html
never say anything report.json does not hold. Besides the section 6 keys, each variant carries `step_time_p50_s`,
`step_time_p90_s`, `data_wait_fraction` (median), `peak_memory_mb` (max over trials), `warmup_s`,
`break_even_steps` (only when the variant helped), `median_step_ratio` and `median_step_verdict` (the same
comparison of each trial's samples/s at its median step, which a stall of a shared machine hitting a few steps
leaves alone, while the mean counts every cost; both are shown), `tokens_per_s` (median, tasks on sequences),
`flop_per_s` and `mfu` (medians; MFU against the dense GPU datasheet peak or the CPU's measured matmul peak),
`val_accuracy`, `val_metric` with `val_metric_name` (the task's main metric: accuracy for classification,
val_loss for a language model), `result_changed` (final loss or the main metric differs from baseline beyond
noise; None when there is nothing to compare), `errors` (failed trials) and `ok_trials`. The report adds
`speedups` (ablation only: each speed-up read as added to baseline and as all vs -NAME, with an overall verdict
that is "mixed" when the two readings disagree) and `recommended` ({"overrides", "text"}). The caller passes
`env` and any top-level `extra` keys (`recipes`, `command`, ...) to `summarize`.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..io import strict_json, write_atomic
from . import plots
from .stats import (
    bootstrap_median_ci,
    bootstrap_ratio_ci,
    break_even_steps,
    differs_beyond_noise,
    percentiles,
    verdict,
)
from .variants import Variant, format_value

SAY = {"helped": "helped", "no effect": "no measurable effect", "hurt": "hurt", "mixed": "mixed", None: "n/a"}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _ok(trials: list[dict]) -> list[dict]:
    """Trials that ran and measured a usable throughput; anything else counts as failed."""
    def usable(x: float | None) -> bool:
        return x is not None and math.isfinite(x) and x > 0

    return [t for t in trials if t.get("error") is None and usable(_num(t.get("samples_per_s")))]


def _values(trials: list[dict], key: str) -> list[float]:
    return [v for v in (_num(t.get(key)) for t in trials) if v is not None]


def _median(xs: list[float]) -> float | None:
    return float(np.median(xs)) if xs else None


def _interval(median: float | None, ci: tuple[float, float] | None) -> dict:
    return {"median": median, "ci95": list(ci) if ci is not None else None}


MIN_TRIALS = 2  # one trial per side gives an interval of zero width: no verdict can rest on it


def _ratio(sps: list[float], base_sps: list[float], is_base: bool) -> tuple[dict, str | None]:
    if is_base and sps:
        return _interval(1.0, (1.0, 1.0)), None
    if not sps or not base_sps:
        return _interval(None, None), None
    r, ci = bootstrap_ratio_ci(sps, base_sps)
    enough = min(len(sps), len(base_sps)) >= MIN_TRIALS
    return _interval(r, ci), verdict(r, ci) if enough else None


def _summarize_variant(variant: Variant, trials: list[dict], base_ok: list[dict], is_base: bool) -> dict:
    ok = _ok(trials)
    sps, base_sps = _values(ok, "samples_per_s"), _values(base_ok, "samples_per_s")
    ratio, said = _ratio(sps, base_sps, is_base)
    steady, steady_said = _ratio(_values(ok, "median_step_samples_per_s"),
                                 _values(base_ok, "median_step_samples_per_s"), is_base)
    steps = percentiles([s for t in ok for s in (t.get("step_times_s") or [])])
    first, base_first = _median(_values(ok, "first_step_s")), _median(_values(base_ok, "first_step_s"))
    even = None
    # Only for a measurable speed-up: the break-even of a noise-level difference is noise.
    if said == "helped" and None not in (first, base_first, steps["p50"]):
        # The baseline's time for the same work as one variant step, so batch sizes may differ.
        even = break_even_steps(first, base_first, steps["p50"], steps["p50"] * ratio["median"])
    peaks = _values(ok, "peak_memory_mb")
    return {
        "name": variant.name, "overrides": dict(variant.overrides),
        "samples_per_s": _interval(*bootstrap_median_ci(sps)) if sps else _interval(None, None),
        "tokens_per_s": _median(_values(ok, "tokens_per_s")),
        "flop_per_s": _median(_values(ok, "flop_per_s")), "mfu": _median(_values(ok, "mfu")),
        # --target: the median over the trials that reached it; `target_reached` says how many did
        "time_to_target_s": _median(_values(ok, "time_to_target_s")),
        "target_reached": sum(t.get("time_to_target_s") is not None for t in ok) if _targeted(ok) else None,
        "ratio_vs_baseline": ratio, "verdict": said,
        "median_step_ratio": steady, "median_step_verdict": steady_said,
        "step_time_p50_s": steps["p50"], "step_time_p90_s": steps["p90"],
        "data_wait_fraction": _median(_values(ok, "data_wait_fraction")),
        "peak_memory_mb": max(peaks) if peaks else None,
        "compile_s": _median(_values(ok, "compile_s")),
        "first_step_s": first, "warmup_s": _median(_values(ok, "warmup_s")), "break_even_steps": even,
        "final_loss": _median(_values(ok, "final_loss")), "val_accuracy": _median(_values(ok, "val_accuracy")),
        "val_metric_name": next((t["val_metric_name"] for t in ok if t.get("val_metric_name")), None),
        "val_metric": _median(_values(ok, "val_metric")),
        "result_changed": _result_changed(ok, base_ok, is_base),
        "lint": list({f["code"]: f for t in ok for f in t.get("lint") or []}.values()),  # once per finding
        "errors": len(trials) - len(ok), "ok_trials": len(ok), "trials": list(trials),
    }


def _targeted(trials: list[dict]) -> bool:
    return any("target_evals" in t for t in trials)


def _result_changed(ok: list[dict], base_ok: list[dict], is_base: bool) -> bool | None:
    if is_base:
        return False
    pairs = [(_values(ok, k), _values(base_ok, k)) for k in ("final_loss", "val_metric")]
    pairs = [(v, b) for v, b in pairs if v and b]
    return any(differs_beyond_noise(v, b) for v, b in pairs) if pairs else None


def _speedup_readings(rows: dict[str, dict]) -> dict:
    """Each ablated speed-up read twice: +NAME vs baseline, and all vs -NAME (its effect among the others)."""
    out = {}
    sps = {n: _values(_ok(r["trials"]), "samples_per_s") for n, r in rows.items()}
    for name in (n[1:] for n in rows if n.startswith("+")):
        added = rows[f"+{name}"]["ratio_vs_baseline"] | {"verdict": rows[f"+{name}"]["verdict"]}
        removed = None
        if sps.get("all") and sps.get(f"-{name}"):
            removed_ratio, said = _ratio(sps["all"], sps[f"-{name}"], is_base=False)
            removed = removed_ratio | {"verdict": said}
        said = {x["verdict"] for x in (added, removed) if x and x["verdict"]}
        overall = None if not said else said.pop() if len(said) == 1 else "mixed"
        out[name] = {"added": added, "removed": removed, "verdict": overall}
    return out


def _recommend_speedups(ups: dict, rows: dict[str, dict]) -> dict:
    # Helped in at least one reading and hurt in none; a speed-up with any failed trial is never recommended.
    said = {n: {x["verdict"] for x in (s["added"], s["removed"]) if x} for n, s in ups.items()}
    failed = [n for n in ups if rows[f"+{n}"]["errors"] or rows.get(f"-{n}", {}).get("errors")]
    chosen = [n for n, v in said.items() if "helped" in v and "hurt" not in v and n not in failed]
    changed = [n for n in chosen if rows[f"+{n}"]["result_changed"]]
    text = ", ".join(chosen) if chosen else "baseline (no speed-up helped measurably)"
    if failed:
        text += f"; left out because trials failed: {', '.join(failed)}"
    if changed:
        text += f"; check results: {', '.join(changed)} changed final loss or accuracy beyond noise"
    return {"overrides": {f"speedups.{n}.enabled": n in chosen for n in ups}, "text": text}


INTERRUPTED = {"overrides": {}, "text": "none: the bench was interrupted before all its trials ran, so nothing is "
               "recommended from its partial figures; run it again to the end"}


def _recommend(report: dict) -> dict:
    """Ablation: the speed-ups that helped; --vary: the fastest combination that helped, else the baseline.
    A variant whose trials failed is never recommended."""
    rows = {r["name"]: r for r in report["variants"]}
    if not rows[report["baseline"]]["ok_trials"]:
        return {"overrides": {}, "text": "none: every variant's trials failed, so nothing could be compared "
                "(see Failed trials)" if not any(r["ok_trials"] for r in rows.values()) else
                "none: the baseline's trials failed, so nothing could be compared with it (see Failed trials)"}
    if report.get("speedups"):
        return _recommend_speedups(report["speedups"], rows)
    helped = [r for r in report["variants"] if r["verdict"] == "helped" and not r["errors"]]
    best = max(helped, key=lambda r: r["samples_per_s"]["median"], default=rows[report["baseline"]])
    if best["name"] == report["baseline"]:
        return {"overrides": dict(best["overrides"]), "text": f"{best['name']} (nothing was measurably faster)"}
    r = best["ratio_vs_baseline"]
    return {"overrides": dict(best["overrides"]), "text": f"{best['name']} ({_with_ci(r)} vs baseline)"}


def summarize(trials: list[dict], variants: list[Variant], baseline: str, *,
              env: dict | None = None, extra: dict | None = None) -> dict:
    """The report dict of DESIGN.md section 6 from raw trial dicts; failed trials are kept and counted.

    `env` becomes report["env"]; `extra` (e.g. {"command": ..., "recipes": ...}) is merged at top level.
    """
    names = [v.name for v in variants]
    if baseline not in names:
        raise ValueError(f"baseline `{baseline}` is not one of the variants: {', '.join(names)}")
    by_name: dict[str, list[dict]] = {n: [] for n in names}
    for t in trials:
        if t.get("variant") not in by_name:
            raise ValueError(f"trial for unknown variant `{t.get('variant')}`; variants: {', '.join(names)}")
        by_name[t["variant"]].append(t)
    ablation = baseline == "baseline" and any(n[:1] == "+" for n in names)
    if not ablation and not _ok(by_name[baseline]):  # --vary: ratios against the first variant that ran
        baseline = next((n for n in names if _ok(by_name[n])), baseline)
    base_ok = _ok(by_name[baseline])
    rows = {v.name: _summarize_variant(v, by_name[v.name], base_ok, v.name == baseline) for v in variants}
    report = {"baseline": baseline, "variants": list(rows.values()), "env": dict(env or {}),
              "speedups": _speedup_readings(rows) if ablation else {}}
    report["recommended"] = INTERRUPTED if (extra or {}).get("interrupted") else _recommend(report)
    clash = set(extra or {}) & set(report)
    if clash:
        raise ValueError(f"extra keys {sorted(clash)} would overwrite computed report keys")
    return report | dict(extra or {})


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def _ci(d: dict, fmt: str = "{:.2f}") -> str:
    return "" if d.get("ci95") is None else "[{}, {}]".format(*(fmt.format(x) for x in d["ci95"]))


def _with_ci(d: dict, fmt: str = "{:.2f}", unit: str = "x") -> str:
    return "n/a" if d.get("median") is None else f"{fmt.format(d['median'])}{unit} {_ci(d, fmt)}"


def _reading(d: dict | None) -> str:
    if d is None or d.get("median") is None:
        return "no successful trials"
    return f"{SAY[d['verdict']]}, {_with_ci(d)}"


def _target_cell(r: dict, target: str | None) -> list[str]:
    if not target:
        return []
    if not r.get("target_reached"):
        return ["never reached"]
    return [f"{r['time_to_target_s']:.1f} ({r['target_reached']}/{r['ok_trials']} trials)"]


def _row(r: dict, is_base: bool, target: str | None = None, compiled: bool = False) -> list[str]:
    sps, ratio = r["samples_per_s"], r["ratio_vs_baseline"]
    flags = (["results changed"] if r["result_changed"] else []) + ([f"{r['errors']} failed"] if r["errors"] else [])
    return [
        r["name"], _with_ci(sps, "{:.1f}", "") + _tokens(r), _with_ci(ratio),
        _with_ci(r.get("median_step_ratio") or {}),
        "baseline" if is_base else SAY[r["verdict"]], _step_ms(r),
        _f(r.get("mfu"), "{:.1%}"), _f(r["data_wait_fraction"], "{:.0%}"), _f(r["peak_memory_mb"], "{:.0f}"),
        _f(r["first_step_s"], "{:.2f}"), *([_f(r.get("compile_s"), "{:.1f}")] if compiled else []),
        "" if is_base else _f(r["break_even_steps"], "{:.0f}"),
        _f(r["final_loss"], "{:.4f}"), _f(r.get("val_metric"), "{:.4f}"), *_target_cell(r, target), "; ".join(flags),
    ]


def table(report: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the ranked table (fastest median samples/s first, failed variants last)."""
    header = ["variant", "samples/s [95% CI]", "ratio [95% CI]", "median-step ratio", "verdict vs baseline",
              "step p50/p90 ms", "MFU",
              "data wait", "peak MB", "first step s"]
    compiled = any(r.get("compile_s") is not None for r in report["variants"])  # a column only when one compiled
    header += ["compile s"] if compiled else []
    header += ["break-even steps", "final loss", _metric_name(report)]
    target = (report.get("settings") or {}).get("target")
    header += [f"time to {target} s"] if target else []
    ranked = sorted(report["variants"], key=lambda r: -(r["samples_per_s"]["median"] or -math.inf))
    return header + ["flag"], [_row(r, r["name"] == report["baseline"], target, compiled) for r in ranked]


def _tokens(r: dict) -> str:
    return f" ({r['tokens_per_s']:.0f} tokens/s)" if r.get("tokens_per_s") else ""


def _metric_name(report: dict) -> str:
    return next((r["val_metric_name"] for r in report["variants"] if r.get("val_metric_name")), "val metric")


def _step_ms(r: dict) -> str:
    p50, p90 = r["step_time_p50_s"], r["step_time_p90_s"]
    return "n/a" if p50 is None else f"{p50 * 1000:.1f}/{p90 * 1000:.1f}"


def verdict_lines(report: dict) -> list[str]:
    """Plain-language verdicts: one per speed-up for an ablation, one per non-baseline variant otherwise."""
    if report.get("speedups"):
        lines, rows = [], {r["name"]: r for r in report["variants"]}
        for name, s in report["speedups"].items():
            line = f"{name}: {SAY[s['verdict']]}. Added to baseline: {_reading(s['added'])}"
            if f"-{name}" in rows:
                line += f"; removed from all (all vs -{name}): {_reading(s['removed'])}"
            failed = sum(rows[n]["errors"] for n in (f"+{name}", f"-{name}") if n in rows)
            lines.append(line + "." + (f" {failed} of its trials failed." if failed else ""))
        return lines
    return [f"{r['name']}: {_reading(r['ratio_vs_baseline'] | {'verdict': r['verdict']})} vs baseline"
            + _steady_disagrees(r) + (" (results changed)" if r["result_changed"] else "")
            for r in report["variants"] if r["name"] != report["baseline"]]


def _steady_disagrees(r: dict) -> str:
    """The median-step reading, when its verdict differs from the mean's: stalls (or a cost that hits only some
    steps) decided one of them, and the reader should know."""
    steady = r.get("median_step_ratio") or {}
    if steady.get("median") is None or r.get("median_step_verdict") in (None, r["verdict"]):
        return ""
    return f"; by median step times {_reading(steady | {'verdict': r['median_step_verdict']})}"


def failed_lines(report: dict) -> list[str]:
    """'variant trial N: message' for each failed trial; for a traceback the message is its last line."""
    out = []
    for r in report["variants"]:
        for t in r["trials"]:
            if _ok([t]):
                continue
            text = (t.get("error") or "trial reported no samples_per_s").strip()
            lines = [ln for ln in text.splitlines() if ln.strip()] or ["(empty error)"]
            # A traceback's first line says nothing; its last line names the exception.
            said = lines[-1] if lines[0].startswith("Traceback") else lines[0]
            out.append(f"{r['name']} trial {t.get('trial')}: {said}")
    return out


def lint_lines(report: dict) -> list[str]:
    """Each speed-lint finding once, with the variants it was found in."""
    found: dict[str, tuple[dict, list[str]]] = {}
    for r in report["variants"]:
        for f in r.get("lint") or []:
            found.setdefault(f["code"], (f, []))[1].append(r["name"])
    return [f"{f['found']} Fix: {f['fix']} ({', '.join(names)})" for f, names in found.values()]


def render_markdown(report: dict) -> str:
    """report.md: title, command/env, ranked table, verdicts, recommended configuration, failed trials."""
    out = ["# accel bench report", ""]
    if report.get("command"):
        out.append(f"Command: `{report['command']}`  ")
    if report.get("env"):
        out.append("Environment: " + ", ".join(f"{k}={format_value(v)}" for k, v in report["env"].items()))
    if report.get("interrupted"):
        done = sum(len(r["trials"]) for r in report["variants"])
        planned = report.get("trials_planned", "?")
        out += ["", f"**Interrupted** after {done} of {planned} trials: the figures below cover the finished trials "
                "only, and nothing is recommended."]
    header, rows = table(report)
    out += ["", f"Baseline: `{report['baseline']}`. Ranked by median samples/s.", "",
            "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out += ["", "## Verdicts", ""] + [f"- {ln}" for ln in verdict_lines(report)]
    out += ["", "## Recommended configuration", "", report["recommended"]["text"]]
    lint = lint_lines(report)
    if lint:
        out += ["", "## Speed lint", ""] + [f"- {ln}" for ln in lint]
    failed = failed_lines(report)
    if failed:
        out += ["", "## Failed trials", ""] + [f"- {ln}" for ln in failed]
    return "\n".join(out) + "\n"


def write_reports(report: dict, out_dir: Path) -> dict[str, Path]:
    """Write report.json, report.md and report.html (with PNG plots) into `out_dir`; returns their paths.

    JSON and Markdown are written first, so a plotting failure cannot lose the numbers.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md"}
    write_atomic(paths["json"], strict_json(report, indent=2) + "\n")
    paths["md"].write_text(render_markdown(report))
    notes = verdict_lines(report) + ["Recommended configuration: " + report["recommended"]["text"]]
    paths["html"] = plots.write_html(report, out_dir, table(report), notes, failed_lines(report))
    return paths
