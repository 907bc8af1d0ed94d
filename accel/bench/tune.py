"""`accel tune`: measure the cheap knobs (batch size, DataLoader workers, threads) and write the best as YAML.

One knob at a time, in order, each starting from the best values found so far (coordinate descent, one pass).
Every candidate runs through the bench's trial runner: fresh processes, interleaved trials, warm-up excluded.
A candidate replaces the current value only when its throughput ratio's interval says "helped", over at least
two trials, none of which failed; a noise-level win keeps the current value. Batch sizes are tried in ascending
order and the first one that fails (out of memory, or no full batch left) bounds the search: larger ones are
not run.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from ..data.loaders import available_cpus
from ..errors import AccelError
from ..recipe import Recipe
from ..recipe_yaml import parse_value
from ..registry import SPEEDUPS
from .report import MIN_TRIALS, summarize
from .runner import TrialSettings, resolve_variant, run_trials, write_recipes
from .variants import Variant, format_value, interleave, vary_variants

BATCH_KEY, WORKERS_KEY = "data.batch_size", "data.loader.num_workers"
THREAD_FIELDS = ("num_threads", "threads", "intra_op_threads", "intra_op")  # how a `threads` speed-up may name it


@dataclass
class Knob:
    """A recipe key and the values to try; `bounded`: ascending, and the first failure ends the search."""

    key: str
    values: list[Any]
    bounded: bool = False


@dataclass
class TuneResult:
    """What tune measured (`rows`, one per candidate) and chose (`chosen`: dotted key -> value)."""

    chosen: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)


def lookup(data: dict, key: str) -> Any:
    """The value at a dotted key of plain recipe data, or None when it is not there."""
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def threads_key() -> str | None:
    """The recipe key of the `threads` speed-up's thread count, or None when no such speed-up is registered."""
    if "threads" not in SPEEDUPS:
        return None
    fields = getattr(SPEEDUPS.get("threads").Config, "model_fields", {})
    return next((f"speedups.threads.{name}" for name in THREAD_FIELDS if name in fields), None)


def _listed(text: str | None, default: list[Any]) -> list[Any]:
    # None: the flag was not given, use the default; "" (e.g. --threads=): skip this knob.
    if text is None:
        return default
    return [parse_value(part) for part in text.split(",") if part.strip()]


def build_knobs(base: Recipe, batch_sizes: str | None = None, workers: str | None = None,
                threads: str | None = None, tries: list[str] = ()) -> list[Knob]:
    """The knobs to search, with default candidates derived from the recipe and this machine's cores."""
    b, cpus = base.data.batch_size, available_cpus()
    knobs = [Knob(BATCH_KEY, _listed(batch_sizes, [max(1, b // 2), b, 2 * b, 4 * b]), bounded=True),
             Knob(WORKERS_KEY, _listed(workers, [n for n in (0, 1, 2, 4) if n <= cpus]))]
    key = threads_key()
    counts = sorted({n for n in (1, 2, 4, 8, 16, 32) if n <= cpus} | {cpus})
    if key is not None:
        knobs.append(Knob(key, _listed(threads, counts)))
    elif threads:
        raise AccelError("--threads needs a registered `threads` speed-up with a thread-count option; "
                         "none is installed. Use --try KEY=V1,V2 for the key your setup uses.")
    for item in tries:
        variants = vary_variants([item])
        knobs.append(Knob(next(iter(variants[0].overrides)), [v.overrides[k] for v in variants for k in v.overrides]))
    for knob in knobs:
        if knob.bounded and not all(isinstance(v, int) and v > 0 for v in knob.values):
            raise AccelError(f"{knob.key} candidates must be positive integers, got {knob.values}.")
    return [k for k in knobs if k.values]


def _candidates(knob: Knob, current: Any) -> list[Any]:
    values = list(dict.fromkeys([current, *knob.values]))
    return sorted(values) if knob.bounded else values


def _config_key(base: dict, overrides: dict[str, Any]) -> str:
    # Overrides equal to the recipe's own value change nothing: such configurations share measurements.
    real = {k: v for k, v in overrides.items() if lookup(base, k) != v}
    return json.dumps(real, sort_keys=True, default=str)


def _failed_bound(knob: Knob, names: dict[str, Any], current: Any):
    """A skip rule for run_trials: skip values at or above the smallest value that has failed (never the
    current value: it is what every other candidate is compared with)."""
    def skip(variant: str, results: list[dict]) -> str | None:
        failed = [names[r["variant"]] for r in results if r.get("error") and r["variant"] in names]
        if knob.bounded and failed and names[variant] >= min(failed) and names[variant] != current:
            return f"{knob.key}={min(failed)} failed, so larger values are not tried"
        return None

    return skip


def _run_stage(base: Recipe, knob: Knob, chosen: dict[str, Any], cache: dict[str, list[dict]], out: Path,
               settings: TrialSettings, trials: int, console: Console) -> tuple[list[Variant], list[dict], str]:
    """Measure every candidate of `knob` not measured before: the stage's variants, all their trials (earlier
    measurements of the same configuration reused) and the name of the current value's variant."""
    plain = base.dump()
    current = chosen.get(knob.key, lookup(plain, knob.key))
    variants = [Variant(f"{knob.key}={format_value(v)}", {**chosen, knob.key: v}) for v in _candidates(knob, current)]
    new = [v for v in variants if _config_key(plain, v.overrides) not in cache]
    files = write_recipes({v.name: resolve_variant(base, v) for v in new}, out)
    names = {v.name: v.overrides[knob.key] for v in variants}
    jobs = [(t, v.name, files[v.name]) for t, v in interleave(new, trials)] if new else []
    results = run_trials(jobs, out, settings, console, skip=_failed_bound(knob, names, current)) if jobs else []
    for v in new:
        cache[_config_key(plain, v.overrides)] = [r for r in results if r["variant"] == v.name]
    trials_of = [r | {"variant": v.name} for v in variants for r in cache[_config_key(plain, v.overrides)]]
    return variants, trials_of, variants[[names[v.name] for v in variants].index(current)].name


def _pick(report: dict, baseline: str) -> dict:
    rows = [r for r in report["variants"] if r["verdict"] == "helped" and not r["errors"]]
    best = max(rows, key=lambda r: r["samples_per_s"]["median"], default=None)
    return best or next(r for r in report["variants"] if r["name"] == baseline)


def tune(base: Recipe, knobs: list[Knob], work: str | Path, settings: TrialSettings, trials: int = 2,
         console: Console | None = None) -> TuneResult:
    """Search `knobs` in order by measurement (trials under `work`); the chosen values and every measurement."""
    work, console = Path(work), console or Console(stderr=True)
    result, cache = TuneResult(), {}
    for i, knob in enumerate(knobs):
        variants, trials_of, current = _run_stage(base, knob, result.chosen, cache, work / f"{i}-{knob.key}",
                                                  settings, trials, console)
        if not any(t.get("error") is None for t in trials_of if t["variant"] == current):
            raise AccelError(f"tune: the starting configuration ({current}) failed; fix the recipe first "
                             f"(trial logs under {work}).")
        report = summarize(trials_of, variants, current)
        best = _pick(report, current)
        result.chosen[knob.key] = best["overrides"][knob.key]
        result.env = result.env or next((t["env"] for t in trials_of if t.get("env")), {})
        result.rows += [_row(knob.key, r, current, best["name"]) for r in report["variants"]]
    record = {"chosen": result.chosen, "rows": result.rows, "env": result.env}
    (work / "tune.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    return result


def _row(key: str, r: dict, current: str, best: str) -> dict[str, Any]:
    failed = [t["error"] for t in r["trials"] if t.get("error")]
    note = "chosen" if r["name"] == best else "current" if r["name"] == current else ""
    faster = (r["ratio_vs_baseline"]["median"] or 0) > 1
    if r["verdict"] is None and faster and r["name"] not in (best, current) and r["ok_trials"] < MIN_TRIALS:
        note = f"not trusted: fewer than {MIN_TRIALS} trials"
    if not r["trials"]:
        note = "not run (a smaller value failed)"
    elif failed:
        last = [ln for ln in str(failed[0]).strip().splitlines() if ln.strip()] or ["?"]
        note = (note + "; " if note else "") + f"{len(failed)} failed: {last[-1][:120]}"
    return {"knob": key, "value": r["overrides"][key], "samples_per_s": r["samples_per_s"],
            "ratio": r["ratio_vs_baseline"], "verdict": r["verdict"], "note": note}


def _ci(d: dict, fmt: str, unit: str = "") -> str:
    if d.get("median") is None:
        return "n/a"
    ci = d.get("ci95")
    return fmt.format(d["median"]) + unit + (" [{}, {}]".format(*(fmt.format(x) for x in ci)) if ci else "")


def table(result: TuneResult) -> Table:
    """The measurements as a rich table, one row per candidate, grouped by knob."""
    out = Table(title="accel tune: samples/s per candidate (ratio vs the current value)")
    for column in ("knob", "value", "samples/s [95% CI]", "ratio [95% CI]", "verdict", "note"):
        out.add_column(column)
    for r in result.rows:
        out.add_row(r["knob"], format_value(r["value"]), _ci(r["samples_per_s"], "{:.1f}"),
                    _ci(r["ratio"], "{:.2f}", "x"), r["verdict"] or "", r["note"])
    return out


def _nested(chosen: dict[str, Any]) -> dict:
    data: dict = {}
    for key, value in chosen.items():
        node = data
        for part in key.split(".")[:-1]:
            node = node.setdefault(part, {})
        node[key.split(".")[-1]] = value
    return data


def _comment(result: TuneResult, base: Recipe, command: str, settings: TrialSettings, trials: int) -> list[str]:
    env = result.env
    lines = [f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M')}.",
             f"Measured on {env.get('device', 'this machine')}, torch {env.get('torch', '?')}: each candidate ran "
             f"{trials} trial(s) in fresh processes, {settings.steps} timed steps after {settings.warmup} warm-up.",
             f"A value replaced the previous choice only when measurably faster (its 95% interval above 1.0x, "
             f"at least {MIN_TRIALS} trials, none failed)."]
    plain = base.dump()
    for key, value in result.chosen.items():
        row = next(r for r in result.rows if r["knob"] == key and r["value"] == value)
        was = lookup(plain, key)
        said = f"{_ci(row['ratio'], '{:.2f}', 'x')} samples/s vs the previous choice" if was != value else "kept"
        lines.append(f"{key}: {format_value(value)} (recipe had {format_value(was)}; {said})")
    if result.chosen.get(BATCH_KEY, base.data.batch_size) != base.data.batch_size:
        lines.append("The batch size changed: it changes optimisation, so re-check the learning rate and accuracy.")
    lines.append("Use: `base: <this file>` in a recipe; keys the recipe sets itself win over a base file.")
    return lines


def write_fragment(result: TuneResult, path: str | Path, base: Recipe, command: str, settings: TrialSettings,
                   trials: int) -> Path:
    """The chosen values as a recipe fragment, headed by comments saying what was measured, where and when."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "".join(f"# {line}\n" for line in _comment(result, base, command, settings, trials))
    path.write_text(header + yaml.safe_dump(_nested(result.chosen), sort_keys=False))
    return path
