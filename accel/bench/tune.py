"""`accel tune`: choose speed-ups and the cheap knobs (batch size, workers, threads) by measurement; write YAML.

One knob at a time, in order, each starting from the best values found so far (coordinate descent, one pass;
accel/bench/knobs.py says which knobs, which candidates, and why in that order). That order is how the search
handles interactions: each knob is judged in the configuration the earlier ones chose (layout and kernels in the
chosen dtype, compile over all of them, batch size with compile on, workers and threads with the final compute),
at the cost of not revisiting an earlier knob. Every candidate runs through the bench's trial runner: fresh
processes, interleaved trials, warm-up excluded, the reference measured again in every stage. A candidate
replaces the reference (the recipe's value; off for a speed-up, since the simpler setting should win a tie) only
when its throughput ratio's interval says "helped", by mean samples/s and by the median step's both (a stall of a
shared machine moves the one, a cost hitting only some steps hides from the other), over at least two trials,
none of which failed, when (a speed-up) its training loss stayed within noise of the reference's (trials evaluate
nothing: speed and that loss are all tune compares), and when its start-up cost (compilation) is repaid within
the recipe's planned steps. Batch sizes are tried in ascending order and the first one that fails (out of memory,
or no full batch left) bounds the search. A budget skips the knobs whose trials would not fit, and ends a stage
whose remaining trials no longer fit once its first trials show them slower than estimated (compile's minutes).
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

from ..errors import AccelError
from ..recipe import Recipe
from .knobs import BATCH_KEY, TRAITS, WORKERS_KEY, Knob, build_knobs, threads_key, usable  # noqa: F401 (API)
from .report import MIN_TRIALS, summarize
from .runner import TrialSettings, resolve_variant, run_trials, write_recipes
from .variants import Variant, format_value, interleave


@dataclass
class TuneResult:
    """What tune measured (`rows`, one per candidate) and chose (`chosen`: dotted key -> value)."""

    chosen: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    final: dict[str, Any] | None = None  # the tuned configuration against the recipe as given, measured last
    compared: list[str] = field(default_factory=list)  # knobs with a candidate that ran beside the reference

    @property
    def labels(self) -> dict[str, str]:
        """Dotted key -> the label of the value chosen for it."""
        return {r["knob"]: r["label"] for r in self.rows if r["knob"] in self.chosen
                and r["value"] == self.chosen[r["knob"]]}


def lookup(data: dict, key: str) -> Any:
    """The value at a dotted key of plain recipe data, or None when it is not there."""
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _candidates(knob: Knob, current: Any, traits: dict[str, bool]) -> list[Any]:
    if knob.speedup:  # off is the reference; the recipe's own setting is one of the candidates
        return usable(knob, traits)
    values: list[Any] = []
    for value in [current, *knob.values]:  # distinct, by equality: --try values may be lists
        if value not in values:
            values.append(value)
    return sorted(values) if knob.bounded else values


def _effective(base: Recipe, overrides: dict[str, Any]) -> dict[str, Any]:
    """The overrides that change the recipe (one that repeats the recipe's value, or its absence, does not)."""
    plain = base.dump()
    return {k: v for k, v in overrides.items() if lookup(plain, k) != v}


def _config_key(base: Recipe, overrides: dict[str, Any]) -> str:
    """The configuration the overrides make, however they say it: an override equal to the recipe's value, or a
    speed-up turned off rather than absent, changes nothing, and such configurations share measurements."""
    data = resolve_variant(base, Variant("key", _effective(base, overrides))).dump()
    data["speedups"] = {name: cfg for name, cfg in data["speedups"].items() if cfg.get("enabled", True)}
    return json.dumps(data, sort_keys=True, default=str)


def _failed_bound(knob: Knob, names: dict[str, Any], current: Any):
    """A skip rule for run_trials: skip values at or above the smallest value that has failed (never the
    current value: it is what every other candidate is compared with)."""
    def skip(variant: str, results: list[dict]) -> str | None:
        failed = [names[r["variant"]] for r in results if r.get("error") and r["variant"] in names]
        if knob.bounded and failed and names[variant] >= min(failed) and names[variant] != current:
            return f"{knob.key}={min(failed)} failed, so larger values are not tried"
        return None

    return skip


@dataclass
class Stage:
    """One knob's measurements: its variants, every trial of them, and the reference variant's name."""

    knob: Knob
    variants: list[Variant]
    trials: list[dict]
    reference: str
    new_trials: list[dict]  # the trials this stage ran (variants equal in effect share them)
    cut: bool = False  # ended early: its remaining trials would have overrun the budget


def _reference(knob: Knob, chosen: dict[str, Any], plain: dict) -> Any:
    return knob.values[0] if knob.speedup else chosen.get(knob.key, lookup(plain, knob.key))


def _variants(knob: Knob, chosen: dict[str, Any], plain: dict, traits: dict[str, bool]) -> list[Variant]:
    reference = _reference(knob, chosen, plain)
    return [Variant(f"{knob.key}={knob.label(v) if v in knob.values else format_value(v)}", {**chosen, knob.key: v})
            for v in _candidates(knob, reference, traits)]


def _config_keys(base: Recipe, variants: list[Variant]) -> dict[str, str]:
    """Variant name -> the configuration it makes: variants equal in effect share one, and run once."""
    return {v.name: _config_key(base, v.overrides) for v in variants}


def _run_stage(base: Recipe, knob: Knob, chosen: dict[str, Any], out: Path, settings: TrialSettings, trials: int,
               console: Console, traits: dict[str, bool], budget: Budget | None = None) -> Stage:
    """Measure every candidate of `knob` and its reference, interleaved, all in this stage.

    The reference is measured again in every stage, never taken from an earlier one: a shared machine's speed
    drifts from minute to minute, and only trials run side by side compare (a reference measured at a fast
    moment, reused four stages later, made a worker setting equal to it in effect read 0.94x, "hurt")."""
    plain = base.dump()
    reference = _reference(knob, chosen, plain)
    variants = _variants(knob, chosen, plain, traits)
    keys = _config_keys(base, variants)  # each resolves a recipe: computed once
    runs: dict[str, Variant] = {}  # config key -> the first variant making it
    for v in variants:
        runs.setdefault(keys[v.name], v)
    files = write_recipes({v.name: resolve_variant(base, Variant(v.name, _effective(base, v.overrides)))
                           for v in runs.values()}, out)
    names = {v.name: v.overrides[knob.key] for v in variants}
    jobs = [(t, v.name, files[v.name]) for t, v in interleave(list(runs.values()), trials)]
    within = _WithinBudget(budget, [name for _, name, _ in jobs])
    failed_bound = _failed_bound(knob, names, reference)
    results = run_trials(jobs, out, settings, console,
                         skip=lambda variant, done: within(variant, done) or failed_bound(variant, done))
    _stop_if_interrupted(results)
    measured = {key: [r for r in results if r["variant"] == v.name] for key, v in runs.items()}
    trials_of = [r | {"variant": v.name} for v in variants for r in measured[keys[v.name]]]
    ref_name = next(v.name for v in variants if v.overrides[knob.key] == reference)
    return Stage(knob, variants, trials_of, ref_name, results, cut=within.cut)


def _stop_if_interrupted(results: list[dict]) -> None:
    """Ctrl-C or SIGTERM ends the whole search, not only the stage it came in: no later stage runs, and no
    choice rests on a stage cut short."""
    if getattr(results, "interrupted", False):
        raise KeyboardInterrupt


def _pick(report: dict, baseline: str, planned_steps: int | None, guard: bool) -> tuple[dict, dict[str, str]]:
    """The fastest variant that measurably helped, by its mean throughput and by its median step both, left the
    training loss as it was (within noise; with `guard`: a speed-up must not change results, a batch size does)
    and repays its start-up within the planned run, else the baseline; and why each faster one was passed over.

    Both readings must agree because each misleads alone on a shared machine: one stalled step in a reference
    trial makes any candidate's mean look faster (a CPU's default attention kernel once read 1.66x), while the
    median step alone would miss a cost that hits only some steps (a loader falling behind now and then)."""
    passed: dict[str, str] = {}
    rows = [r for r in report["variants"] if r["verdict"] == "helped" and not r["errors"]]
    for r in rows:
        if guard and r.get("result_changed"):
            passed[r["name"]] = "faster, but its training loss moved beyond noise: check it before using it"
            continue
        if r.get("median_step_verdict") not in ("helped", None):
            passed[r["name"]] = (f"faster on average but not by median step times "
                                 f"({_ci(r['median_step_ratio'], '{:.2f}', 'x')}): the gain is in a few steps")
            continue
        even = r.get("break_even_steps")
        if planned_steps and even is not None and even > planned_steps:
            passed[r["name"]] = f"repays its start-up after {even:.0f} steps; the run has {planned_steps}"
    rows = [r for r in rows if r["name"] not in passed]
    best = max(rows, key=lambda r: r["samples_per_s"]["median"], default=None)
    return best or next(r for r in report["variants"] if r["name"] == baseline), passed


def planned_steps(base: Recipe, trials: list[dict]) -> int | None:
    """Optimizer steps the recipe will run, from its budget and the steps per epoch a trial reported."""
    if base.train.max_steps:
        return base.train.max_steps
    per_epoch = next((t["steps_per_epoch"] for t in trials if t.get("steps_per_epoch")), None)
    return per_epoch * base.train.epochs if per_epoch else None


class Budget:
    """Wall-clock budget: trials run only when they fit in what is left beside the `reserve` trials kept back for
    the final check, each estimated at the mean duration seen so far, or at its own variant's where measured."""

    def __init__(self, seconds: float | None, reserve: int = 0):
        self.seconds, self.start, self.walls, self.reserve = seconds, time.perf_counter(), [], reserve

    def record(self, trials: list[dict]) -> None:
        self.walls += [t["wall_s"] for t in trials if t.get("wall_s")]

    def allows(self, runs: int) -> bool:
        return self.fits([None] * runs)

    def fits(self, variants: list[str | None], done: list[dict] = ()) -> bool:
        """Whether trials of `variants` fit, a variant with trials in `done` (its stage's so far) estimated by
        them, any other at the mean trial."""
        walls = self.walls + [t["wall_s"] for t in done if t.get("wall_s")]
        if self.seconds is None or not walls or not variants:
            return True
        # Trials run one after another; the elapsed time also holds each trial process's start-up.
        spent = max(time.perf_counter() - self.start, sum(walls))
        start_up = spent / sum(walls)
        own: dict[str, list[float]] = {}
        for t in done:
            if t.get("wall_s"):
                own.setdefault(t["variant"], []).append(t["wall_s"] * start_up)
        mean = spent / len(walls)
        need = sum(sum(own[v]) / len(own[v]) if v in own else mean for v in variants)
        return spent + need + self.reserve * mean <= self.seconds


class _WithinBudget:
    """A run_trials skip rule that ends a stage (skips every job left) once its remaining jobs no longer fit the
    budget: a candidate much slower to run than the trials before it, a compile's minutes, shows it in its first
    trial. Jobs are asked about in order, once each."""

    def __init__(self, budget: Budget | None, jobs: list[str]):
        self.budget, self.jobs, self.asked, self.cut = budget, jobs, 0, False

    def __call__(self, variant: str, done: list[dict]) -> str | None:
        left, self.asked = self.jobs[self.asked:], self.asked + 1
        if not self.cut and self.budget is not None and not self.budget.fits(left, done):
            self.cut = True
        return "the stage's remaining trials would overrun the --budget" if self.cut else None


def tune(base: Recipe, knobs: list[Knob], work: str | Path, settings: TrialSettings, trials: int = 2,
         console: Console | None = None, budget_s: float | None = None, final_check: bool = False) -> TuneResult:
    """Search `knobs` in order by measurement (trials under `work`); the chosen values and every measurement.
    A knob whose trials would overrun `budget_s` is left as the recipe has it. With `final_check`, the tuned
    configuration then runs against the recipe as given, in time kept back from the budget for it; measured
    slower, the recipe as given is the result: tuning never leaves a user below where they started."""
    work, console = Path(work), console or Console(stderr=True)
    result, traits = TuneResult(), {}
    budget = Budget(budget_s, reserve=2 * trials if final_check else 0)
    plain = base.dump()
    if any(need for knob in knobs for need in knob.needs):  # a trial of the recipe reports the model's traits
        traits = _model_traits(base, knobs[0], work / "reference", settings, console, budget)
    for i, knob in enumerate(knobs):
        variants = _variants(knob, result.chosen, plain, traits)
        result.rows += _unusable_rows(knob, traits)
        if len(variants) < 2:
            continue
        if not budget.allows(len(set(_config_keys(base, variants).values())) * trials):
            reference = _reference(knob, result.chosen, plain)
            result.rows += [_skipped_row(knob.key, v.overrides[knob.key], v.name, "not measured: over the --budget")
                            for v in variants if v.overrides[knob.key] != reference]
            continue
        stage = _run_stage(base, knob, result.chosen, work / f"{i}-{knob.key}", settings, trials, console, traits,
                           budget)
        budget.record(stage.new_trials)
        if not any(t.get("error") is None for t in stage.trials if t["variant"] == stage.reference):
            raise AccelError(f"tune: the starting configuration ({stage.reference}) failed; fix the recipe first "
                             f"(trial logs under {work}).")
        report = summarize(stage.trials, stage.variants, stage.reference)
        best, passed = _pick(report, stage.reference, planned_steps(base, stage.trials), guard=knob.speedup)
        result.chosen[knob.key] = best["overrides"][knob.key]
        if any(t["variant"] != stage.reference for t in stage.trials):
            result.compared.append(knob.key)
        result.env = result.env or next((t["env"] for t in stage.trials if t.get("env")), {})
        rows = [_row(knob.key, r, stage.reference, best["name"], passed) for r in report["variants"]]
        if stage.cut:
            rows = [r | {"note": "; ".join(filter(None, [r["note"], "stage ended early: over the --budget"]))}
                    for r in rows]
        result.rows += rows
    if final_check and _config_key(base, result.chosen) != _config_key(base, {}):  # measure what tuning bought
        budget.reserve = 0
        result.final = _final_check(base, result, work / "final", settings, trials, console, budget)
        if result.final and "hurt" in (result.final["verdict"], result.final.get("median_step_verdict")):
            # knobs chosen one by one, slower together (by either reading: tuning must never cost speed)
            result.final["reverted"], result.chosen = dict(result.chosen), {}
    record = {"chosen": result.chosen, "rows": result.rows, "env": result.env, "final": result.final}
    (work / "tune.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    return result


def _model_traits(base: Recipe, first: Knob, out: Path, settings: TrialSettings, console: Console,
                  budget: Budget) -> dict[str, bool]:
    """One trial of the first knob's reference configuration, for the model traits it reports, so no stage tries
    a candidate the model cannot use (its speed is not compared with anything)."""
    reference = Knob(first.key, [_reference(first, {}, base.dump())], speedup=first.speedup, labels=first.labels[:1])
    stage = _run_stage(base, reference, {}, out, settings, 1, console, {})
    budget.record(stage.new_trials)
    return next((t["model_traits"] for t in stage.trials if t.get("model_traits")), {})


def _final_check(base: Recipe, result: TuneResult, out: Path, settings: TrialSettings, trials: int,
                 console: Console, budget: Budget) -> dict[str, Any] | None:
    """The tuned configuration against the recipe as given, interleaved: what tuning bought, in one run."""
    if not budget.allows(2 * trials):
        return None
    variants = [Variant("recipe as given"), Variant("tuned", _effective(base, result.chosen))]  # no `key: null`
    files = write_recipes({v.name: resolve_variant(base, v) for v in variants}, out)
    done = run_trials([(t, v.name, files[v.name]) for t, v in interleave(variants, trials)], out, settings, console)
    _stop_if_interrupted(done)
    row = summarize(done, variants, "recipe as given")["variants"][1]
    return {"samples_per_s": row["samples_per_s"], "ratio": row["ratio_vs_baseline"], "verdict": row["verdict"],
            "median_step_ratio": row["median_step_ratio"], "median_step_verdict": row["median_step_verdict"]}


def _skipped_row(key: str, value: Any, name: str, note: str) -> dict[str, Any]:
    return {"knob": key, "value": value, "label": name.partition("=")[2], "samples_per_s": {"median": None},
            "ratio": {"median": None}, "verdict": None, "note": note}


def _unusable_rows(knob: Knob, traits: dict[str, bool]) -> list[dict[str, Any]]:
    """A row for each value the model cannot use (a trait it lacks), saying which."""
    gone = [(v, need) for v, need in zip(knob.values, knob.needs) if need and not traits.get(need, True)]
    return [_skipped_row(knob.key, v, f"{knob.key}={knob.label(v)}", f"not tried: the model has no {TRAITS[need]}")
            for v, need in gone]


def _row(key: str, r: dict, current: str, best: str, passed: dict[str, str]) -> dict[str, Any]:
    failed = [t["error"] for t in r["trials"] if t.get("error")]
    note = "chosen" if r["name"] == best else passed.get(r["name"], "")
    if r["name"] == current and r["name"] != best:
        note = "reference (off)" if key.startswith("speedups.") else "current"
    faster = (r["ratio_vs_baseline"]["median"] or 0) > 1
    if r["verdict"] is None and faster and r["name"] not in (best, current) and r["ok_trials"] < MIN_TRIALS:
        note = f"not trusted: fewer than {MIN_TRIALS} trials"
    if not r["trials"]:
        note = "not run (a smaller value failed)"
    elif failed:
        last = [ln for ln in str(failed[0]).strip().splitlines() if ln.strip()] or ["?"]
        note = (note + "; " if note else "") + f"{len(failed)} failed: {last[-1][:120]}"
    return {"knob": key, "value": r["overrides"][key], "label": r["name"].partition("=")[2],
            "samples_per_s": r["samples_per_s"], "ratio": r["ratio_vs_baseline"], "verdict": r["verdict"],
            "median_step_ratio": r["median_step_ratio"], "note": note}


def _ci(d: dict, fmt: str, unit: str = "") -> str:
    if d.get("median") is None:
        return "n/a"
    ci = d.get("ci95")
    return fmt.format(d["median"]) + unit + (" [{}, {}]".format(*(fmt.format(x) for x in ci)) if ci else "")


def table(result: TuneResult) -> Table:
    """The measurements as a rich table, one row per candidate, grouped by knob."""
    out = Table(title="accel tune: samples/s per candidate (ratio vs the recipe's value; vs off for speed-ups)")
    for column in ("knob", "value", "samples/s [95% CI]", "ratio [95% CI]", "median-step ratio", "verdict", "note"):
        out.add_column(column)
    for r in result.rows:
        out.add_row(r["knob"], r["label"], _ci(r["samples_per_s"], "{:.1f}"), _ci(r["ratio"], "{:.2f}", "x"),
                    _ci(r.get("median_step_ratio") or {}, "{:.2f}", "x"), r["verdict"] or "", r["note"])
    if result.final:
        final = result.final
        out.add_row("final check", "tuned vs recipe", _ci(final["samples_per_s"], "{:.1f}"),
                    _ci(final["ratio"], "{:.2f}", "x"), _ci(final.get("median_step_ratio") or {}, "{:.2f}", "x"),
                    final["verdict"] or "", f"by median steps: {final['median_step_verdict']}"
                    if final.get("median_step_verdict") not in (None, final["verdict"]) else "")
    return out


def _nested(chosen: dict[str, Any]) -> dict:
    data: dict = {}
    for key, value in chosen.items():
        node = data
        for part in key.split(".")[:-1]:
            node = node.setdefault(part, {})
        node[key.split(".")[-1]] = value
    return data


NOTHING_MEASURED = ("Nothing was measured: no knob's candidates ran beside its reference within the --budget (or "
                    "every candidate was skipped), so this fragment changes nothing. Give a larger --budget.")


def _comment(result: TuneResult, base: Recipe, command: str, settings: TrialSettings, trials: int) -> list[str]:
    env = result.env
    if not result.compared and result.final is None:
        return [f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M')}.", NOTHING_MEASURED]
    lines = [f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M')}.",
             f"Measured on {env.get('device', 'this machine')}, torch {env.get('torch', '?')}: each candidate ran "
             f"{trials} trial(s) in fresh processes, {settings.steps} timed steps after {settings.warmup} warm-up.",
             f"A value replaced the previous choice only when measurably faster (its 95% interval above 1.0x, "
             f"by mean samples/s and by median step time both, at least {MIN_TRIALS} trials, none failed)."]
    plain = base.dump()
    for key, value in result.chosen.items():
        row = next(r for r in result.rows if r["knob"] == key and r["value"] == value)
        ratio, label = _ci(row["ratio"], "{:.2f}", "x"), row["label"]
        if key.startswith("speedups."):
            said = "nothing measurably beat off" if label == "off" else f"{ratio} samples/s vs off"
            lines.append(f"{key}: {label} ({said})")
            continue
        was = lookup(plain, key)
        said = f"{ratio} samples/s vs the previous choice" if was != value else "kept"
        lines.append(f"{key}: {format_value(value)} (recipe had {format_value(was)}; {said})")
    if result.final:
        final = result.final
        lines.append(f"Tuned vs the recipe as given, measured last: {_ci(final['ratio'], '{:.2f}', 'x')} "
                     f"samples/s ({final['verdict'] or 'too few trials for a verdict'}); by median step times "
                     f"{_ci(final.get('median_step_ratio') or {}, '{:.2f}', 'x')}.")
    if result.final and "reverted" in result.final:
        lines.append("Slower than the recipe as given, so nothing is changed: the recipe stays as it is (the "
                     f"measured choice was {result.final['reverted']}).")
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
    plain = base.dump()
    # only what differs from the recipe: a value it already has, or a speed-up left off that it lacks, says nothing
    changed = {k: v for k, v in result.chosen.items()
               if lookup(plain, k) != v and not (lookup(plain, k) is None and v in (None, {"enabled": False}))}
    path.write_text(header + yaml.safe_dump(_nested(changed), sort_keys=False))
    return path
