"""Raw trials in, a `Report` out (docs/bench.md): medians and intervals, verdicts, the recommendation.

Pure: nothing here runs or writes anything, so report.json, report.md and report.html all say what this
computed. Besides the section 6 keys, each variant carries `step_time_p50_s`, `step_time_p90_s`,
`data_wait_fraction` (median), `peak_memory_mb` (max over trials), `warmup_s`, `break_even_steps` (only when the
variant helped), `median_step_ratio` and `median_step_verdict` (the same comparison of each trial's samples/s at
its median step, which a stall of a shared machine hitting a few steps leaves alone, while the mean counts every
cost; both are shown), `tokens_per_s` (median, tasks on sequences), `flop_per_s` and `mfu` (medians; MFU
against the dense GPU datasheet peak or the CPU's hardware peak, peaks.cpu_peak), `val_accuracy`, `val_metric` with
`val_metric_name` (the task's main metric), `result_changed` (final loss or the main metric differs from
baseline beyond noise; None when there is nothing to compare, or one trial a side shows no noise), `errors`
(failed trials), `ok_trials` and, only when its trials ran at two speeds, `unsteady` (the slowest and the
fastest). The report adds `speedups` (ablation only: each speed-up read as added to baseline and as all vs -NAME)
and `recommended`. The caller passes `env` and the run's context (`recipes`, `command`, ...) as `extra`.

A comparison whose trials (the variant's or the baseline's) ran while other processes took a large share of the
cores (accel/measure/load.py's `busy`) gets no verdict: its ratios are kept, `busy` says why, and nothing is recommended
from it. On two busy cores the same bench once read "hurt 0.12x" and minutes later "helped 2.32x".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..measure import load
from . import decide
from .decide import DEFAULT_RULE, Rule
from .records import (
    Interval,
    Reading,
    Recommendation,
    Report,
    SpeedupReadings,
    Trial,
    VariantSummary,
    Verdict,
    busy_fields,
)
from .stats import break_even_steps, differs_beyond_noise, percentiles
from .variants import Variant

MIN_TRIALS = decide.MIN_PAIRS  # one trial per side gives an interval of zero width: no verdict can rest on it
# A variant whose fastest trial ran this much faster than its slowest is unsteady: its interval spans two speeds (a
# cold cache or a worker pool starting in some trials, a neighbour), which three trials cannot average out.
UNSTEADY = 1.3


def ok_trials(trials: list[Trial]) -> list[Trial]:
    return [t for t in trials if t.ok]


def _values(trials: list[Trial], key: str) -> list[float]:
    values = (getattr(t, key) for t in trials)
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _median(xs: list[float]) -> float | None:
    return float(np.median(xs)) if xs else None


def busy_share(*sides: list[Trial]) -> float | None:
    """Others' largest share of the cores during the trials compared, when the machine was busy in any of them
    (`load.busy`); None when it was quiet."""
    return max((t.load["others_share"] for side in sides for t in side if load.busy(t.load)), default=None)


def _ratio(
    ok: list[Trial], base_ok: list[Trial], is_base: bool, busy: float | None, rule: Rule, key: str = "samples_per_s"
) -> Reading:
    """The variant's `key` throughput over the baseline's with its interval and verdict, by the one rule
    (accel/bench/decide.py): paired by round, withheld when the machine was busy (`busy` set)."""
    if is_base and _values(ok, key):
        return Reading(median=1.0, ci95=(1.0, 1.0), verdict=None)
    said = decide.compare(_keyed(ok, key), _keyed(base_ok, key), rule, busy is not None)
    if said.ratio is None:
        return Reading(median=None, ci95=None, verdict=None)
    return Reading(
        median=said.ratio, ci95=said.ci, verdict=said.verdict, **busy_fields(busy), **undecided_fields(said, rule)
    )


def _keyed(trials: list[Trial], key: str) -> list[Trial]:
    """The trials with `key`'s figure as their samples/s (the median step's reads through the same rule)."""
    if key == "samples_per_s":
        return trials
    return [t.model_copy(update={"samples_per_s": getattr(t, key), "step_times_s": None}) for t in trials]


def undecided_fields(said: decide.Decision, rule: Rule) -> dict[str, float]:
    """`undecided=resolution` (and the trials a side that would decide it) when the interval could not decide at
    the rule's resolution; nothing otherwise."""
    if not said.undecided:
        return {}
    needed = said.rounds_to_decide(rule)
    return {"undecided": rule.resolution, **({"trials_needed": needed} if needed else {})}


def _median_interval(xs: list[float]) -> Interval:
    if not xs:
        return Interval(median=None, ci95=None)
    median, ci = float(np.median(xs)), decide.spread_interval(xs)
    # the interval is of the trials' geometric mean; widened to hold the median it is shown with, never narrowed
    return Interval(median=median, ci95=(min(ci[0], median), max(ci[1], median)) if ci else None)


def _interval(reading: Reading) -> Interval:
    return Interval(median=reading.median, ci95=reading.ci95)


def _break_even(ok: list[Trial], base_ok: list[Trial], ratio: Reading, p50: float | None) -> float | None:
    first, base_first = _median(_values(ok, "first_step_s")), _median(_values(base_ok, "first_step_s"))
    # Only for a measurable speed-up: the break-even of a noise-level difference is noise.
    if ratio.verdict != Verdict.HELPED or None in (first, base_first, p50):
        return None
    # The baseline's time for the same work as one variant step, so batch sizes may differ.
    return break_even_steps(first, base_first, p50, p50 * ratio.median)


def _summarize_variant(
    variant: Variant,
    trials: list[Trial],
    base_ok: list[Trial],
    is_base: bool,
    refused: str | None = None,
    rule: Rule = DEFAULT_RULE,
) -> VariantSummary:
    ok = ok_trials(trials)
    busy = busy_share(ok, base_ok)
    sps = _values(ok, "samples_per_s")
    ratio = _ratio(ok, base_ok, is_base, busy, rule)
    steady = _ratio(ok, base_ok, is_base, busy, rule, "median_step_samples_per_s")
    steps = percentiles([s for t in ok for s in (t.step_times_s or [])])
    peaks = _values(ok, "peak_memory_mb")
    return VariantSummary(
        name=variant.name,
        overrides=dict(variant.overrides),
        samples_per_s=_median_interval(sps),
        tokens_per_s=_median(_values(ok, "tokens_per_s")),
        flop_per_s=_median(_values(ok, "flop_per_s")),
        mfu=_median(_values(ok, "mfu")),
        mfu_of=next((t.mfu_of for t in ok if t.mfu_of), None),  # one dtype: the variant's trials compute alike
        # --target: the median over the trials that reached it; `target_reached` says how many did
        time_to_target_s=_median(_values(ok, "time_to_target_s")),
        target_reached=sum(t.time_to_target_s is not None for t in ok) if _targeted(ok) else None,
        time_to_target_ratio=_time_ratio(ok, base_ok, is_base, busy, rule)
        if _targeted(ok) and _targeted(base_ok)
        else None,
        ratio_vs_baseline=_interval(ratio),
        verdict=ratio.verdict,
        **busy_fields(busy),
        **({"undecided": ratio.undecided} if ratio.undecided else {}),
        median_step_ratio=_interval(steady),
        median_step_verdict=steady.verdict,
        step_time_p50_s=steps["p50"],
        step_time_p90_s=steps["p90"],
        data_wait_fraction=_median(_values(ok, "data_wait_fraction")),
        peak_memory_mb=max(peaks) if peaks else None,
        compile_s=_median(_values(ok, "compile_s")),
        first_step_s=_median(_values(ok, "first_step_s")),
        warmup_s=_median(_values(ok, "warmup_s")),
        break_even_steps=_break_even(ok, base_ok, ratio, steps["p50"]),
        build_s=_median(_values(ok, "build_s")),
        eval_s=_median(_values(ok, "eval_s")),
        save_s=_median(_values(ok, "save_s")),
        final_loss=_median(_values(ok, "final_loss")),
        val_accuracy=_median(_values(ok, "val_accuracy")),
        val_metric_name=next((t.val_metric_name for t in ok if t.val_metric_name), None),
        val_metric=_median(_values(ok, "val_metric")),
        result_changed=_result_changed(ok, base_ok, is_base),
        lint=list({f["code"]: f for t in ok for f in t.lint or []}.values()),  # once per finding
        errors=len(trials) - len(ok),
        ok_trials=len(ok),
        trials=list(trials),
        **({"refused": refused} if refused else {}),
        **({"unsteady": spread} if (spread := unsteady(sps)) else {}),
    )


def versus(trials: list[Trial], base_trials: list[Trial], rule: Rule = DEFAULT_RULE) -> tuple[Reading, bool | None]:
    """One variant's trials against another's as against a baseline: the ratio with its verdict, and whether the
    results changed (a revision against the first one, accel/bench/rev_compare.py)."""
    ok, base_ok = ok_trials(trials), ok_trials(base_trials)
    return _ratio(ok, base_ok, False, busy_share(ok, base_ok), rule), _result_changed(ok, base_ok, False)


def undecided_variants(report: Report, pairs: list[tuple[str, str]], rule: Rule, gate: float | None = None) -> set[str]:
    """The variants of every comparison still undecided at the rule's resolution, or of a revision's whose interval
    straddles the `gate`'s line: more rounds of them could decide it (a busy or failed comparison gets none: its
    verdict is withheld whatever the interval)."""
    wanted: set[str] = set()
    for row in report.variants:
        if row.undecided:
            wanted |= {row.name, report.baseline}
    for name, readings in report.speedups.items():
        if readings.removed is not None and readings.removed.undecided:
            wanted |= {"all", f"-{name}"}
    rows = report.by_name
    for name, against in pairs:
        said = versus(rows[name].trials, rows[against].trials, rule)[0]
        straddles = gate is not None and said.busy is None and said.ci95 is not None
        if said.undecided or (straddles and said.ci95[0] < 1 - gate <= said.ci95[1]):
            wanted |= {name, against}
    return wanted


def unsteady(sps: list[float]) -> tuple[float, float] | None:
    """(slowest, fastest) samples/s of a variant's trials when the fastest ran `UNSTEADY` times the slowest."""
    if len(sps) < 2 or min(sps) <= 0 or max(sps) < UNSTEADY * min(sps):
        return None
    return min(sps), max(sps)


def _time_ratio(ok: list[Trial], base_ok: list[Trial], is_base: bool, busy: float | None, rule: Rule) -> Reading:
    """The time to target over the baseline's by the one rule, read through each trial's speed to it (1/s), so the
    verdict reads like a throughput's: helped means sooner. A trial that never got there is counted, not timed:
    most of a side never there decides by the count; some never there leaves the interval out."""

    def speeds(trials: list[Trial]) -> dict[int, float]:
        return {t.trial: 1 / t.time_to_target_s if t.time_to_target_s else 0.0 for t in trials}

    mine, base = speeds(ok), speeds(base_ok)
    if not base or np.median(list(base.values())) <= 0:  # the baseline never got there: nothing to compare with
        return Reading(median=None, ci95=None, verdict=None)
    if is_base:
        return Reading(median=1.0, ci95=(1.0, 1.0), verdict=None)
    if not mine or np.median(list(mine.values())) <= 0:  # counted in steps: a busy machine does not change it
        return Reading(median=None, ci95=None, verdict=Verdict.HURT if mine else None)
    if 0.0 in mine.values() or 0.0 in base.values():
        ratio = float(np.median(list(base.values())) / np.median(list(mine.values())))
        return Reading(median=ratio, ci95=None, verdict=None, **busy_fields(busy))
    said = decide.compare_rates(mine, base, rule, busy is not None)
    ci = (1 / said.ci[1], 1 / said.ci[0]) if said.ci else None
    return Reading(
        median=1 / said.ratio, ci95=ci, verdict=said.verdict, **busy_fields(busy), **undecided_fields(said, rule)
    )


def _targeted(trials: list[Trial]) -> bool:
    return any("target_evals" in t.model_fields_set for t in trials)


def _result_changed(ok: list[Trial], base_ok: list[Trial], is_base: bool) -> bool | None:
    if is_base:
        return False
    pairs = [(_values(ok, k), _values(base_ok, k)) for k in ("final_loss", "val_metric")]
    said = [differs_beyond_noise(v, b) for v, b in pairs if v and b]
    return True if True in said else False if said and None not in said else None


def _speedup_readings(rows: dict[str, VariantSummary], rule: Rule) -> dict[str, SpeedupReadings]:
    """Each ablated speed-up read twice: +NAME vs baseline, and all vs -NAME (its effect among the others)."""
    out = {}
    ok = {n: ok_trials(r.trials) for n, r in rows.items()}
    for name in (n[1:] for n in rows if n.startswith("+")):
        added = rows[f"+{name}"].ratio_reading
        removed = None
        if ok.get("all") and ok.get(f"-{name}"):
            removed = _ratio(ok["all"], ok[f"-{name}"], False, busy_share(ok["all"], ok[f"-{name}"]), rule)
        said = {x.verdict for x in (added, removed) if x and x.verdict}
        overall = None if not said or _busy(added, removed) else said.pop() if len(said) == 1 else Verdict.MIXED
        out[name] = SpeedupReadings(added=added, removed=removed, verdict=overall)
    return out


def _busy(*readings: Reading | None) -> bool:
    return any(r is not None and r.busy is not None for r in readings)


def _unsure(names: list[str]) -> str:
    if not names:
        return ""
    return (
        f"; no verdict for {', '.join(names)}: the machine was busy during their trials, so nothing is "
        "recommended from them (run again when it is quiet)"
    )


def _late(r: VariantSummary, run_steps: int | None) -> bool:
    """Faster, but its start-up is not repaid within the real run's steps."""
    return bool(run_steps) and r.break_even_steps is not None and r.break_even_steps > run_steps


def _payback(rows: list[VariantSummary], run_steps: int | None) -> str:
    """What the recommendation says of start-up costs: those left out for the run's length, or, the length
    unknown, from which run length each chosen one pays."""
    if run_steps:
        late = [f"{r.name} (after {r.break_even_steps:,.0f})" for r in rows if _late(r, run_steps)]
        said = f"left out, as they repay their start-up only after the run's {run_steps:,} steps: {', '.join(late)}"
        return f"; {said}" if late else ""
    paying = [f"{r.name} from {r.break_even_steps:,.0f} steps on" for r in rows if r.break_even_steps]
    if not paying:
        return ""
    return (
        f"; repaying its start-up, {', '.join(paying)}: a shorter run is slower with it (the run's length is not "
        "known here: give --run-steps N to weigh it)"
    )


def _recommend_speedups(
    ups: dict[str, SpeedupReadings], rows: dict[str, VariantSummary], run_steps: int | None
) -> Recommendation:
    # Helped in at least one reading and hurt in none; a speed-up with any failed trial is never recommended, nor
    # one whose start-up the real run would not repay.
    said = {n: {x.verdict for x in (s.added, s.removed) if x} for n, s in ups.items()}
    failed = [n for n in ups if rows[f"+{n}"].errors or (f"-{n}" in rows and rows[f"-{n}"].errors)]
    refused = [n for n in ups if rows[f"+{n}"].refused or (f"-{n}" in rows and rows[f"-{n}"].refused)]
    unsure = [n for n, s in ups.items() if _busy(s.added, s.removed)]
    left_out = failed + refused + unsure
    helped = [n for n, v in said.items() if Verdict.HELPED in v and Verdict.HURT not in v and n not in left_out]
    chosen = [n for n in helped if not _late(rows[f"+{n}"], run_steps)]
    changed = [n for n in chosen if rows[f"+{n}"].result_changed]
    text = ", ".join(chosen) or _none_chosen([n for n in ups if n not in unsure], unsure)
    if failed:
        text += f"; left out because trials failed: {', '.join(failed)}"
    if refused:
        text += f"; left out as refused beside the recipe's other choices: {', '.join(refused)}"
    if rows.get("all") and rows["all"].refused and len(chosen) > 1:
        text += f"; all of them together was refused ({rows['all'].refused}): keep those that can run together"
    text += _unsure(unsure) + _payback([rows[f"+{n}"] for n in helped], run_steps)
    if changed:
        text += f"; check results: {', '.join(changed)} changed final loss or accuracy beyond noise"
    # a speed-up without a verdict stays as the run has it: nothing is recommended from it, not even "off"
    return Recommendation(overrides={f"speedups.{n}.enabled": n in chosen for n in ups if n not in unsure}, text=text)


def _none_chosen(judged: list[str], unsure: list[str]) -> str:
    if not unsure:
        return "baseline (no speed-up helped measurably)"
    if not judged:
        return "no change"
    return f"{', '.join(judged)} off (no speed-up helped measurably on a quiet machine)"


INTERRUPTED = Recommendation(
    overrides={},
    text="none: the bench was interrupted before all its trials ran, so "
    "nothing is recommended from its partial figures; run it again to the end",
)


def _recommend(
    baseline: str, rows: dict[str, VariantSummary], ups: dict[str, SpeedupReadings], run_steps: int | None
) -> Recommendation:
    """Ablation: the speed-ups that helped; --vary: the fastest combination that helped, else the baseline.
    A variant whose trials failed is never recommended, nor one whose start-up a run of `run_steps` would not
    repay."""
    if not rows[baseline].ok_trials:
        return Recommendation(
            overrides={},
            text="none: every variant's trials failed, so nothing could be compared (see Failed trials)"
            if not any(r.ok_trials for r in rows.values())
            else "none: the baseline's trials failed, so nothing could be compared with it (see Failed trials)",
        )
    if ups:
        return _recommend_speedups(ups, rows, run_steps)
    helped = [r for r in rows.values() if r.verdict == Verdict.HELPED and not r.errors]
    paying = [r for r in helped if not _late(r, run_steps)]
    best = max(paying, key=lambda r: r.samples_per_s.median, default=rows[baseline])
    busy = [r.name for r in rows.values() if r.name != baseline and r.busy is not None]
    unsure = _unsure(busy) + _payback(helped if run_steps else [best], run_steps)
    if best.name == baseline:
        text = f"{best.name} (nothing was measurably faster{' on a quiet machine' if busy else ''}){unsure}"
        return Recommendation(overrides=dict(best.overrides), text=text)
    text = f"{best.name} ({best.ratio_vs_baseline.text()} vs baseline){unsure}"
    return Recommendation(overrides=dict(best.overrides), text=text)


def _by_variant(trials: list[Trial], names: list[str]) -> dict[str, list[Trial]]:
    by_name: dict[str, list[Trial]] = {n: [] for n in names}
    for t in trials:
        if t.variant not in by_name:
            raise ValueError(f"trial for unknown variant `{t.variant}`; variants: {', '.join(names)}")
        by_name[t.variant].append(t)
    return by_name


def summarize(
    trials: list[Trial],
    variants: list[Variant],
    baseline: str,
    *,
    env: dict | None = None,
    extra: dict[str, Any] | None = None,
    refused: dict[str, str] | None = None,
    run_steps: int | None = None,
    rule: Rule = DEFAULT_RULE,
) -> Report:
    """The report docs/bench.md describes from the trials; failed trials are kept and counted.

    `env` becomes `report.env`; `extra` sets the run's context fields (`command`, `recipes`, ...); `refused` names
    the variants the conflict rule refused (not run) with the reason; `run_steps`, the real run's optimizer
    steps, within which a recommended variant must repay its start-up.
    """
    refused = refused or {}
    names = [v.name for v in variants]
    if baseline not in names:
        raise ValueError(f"baseline `{baseline}` is not one of the variants: {', '.join(names)}")
    by_name = _by_variant(trials, names)
    ablation = baseline == "baseline" and any(n[:1] == "+" for n in names)
    if not ablation and not ok_trials(by_name[baseline]):  # --vary: ratios against the first variant that ran
        baseline = next((n for n in names if ok_trials(by_name[n])), baseline)
    base_ok = ok_trials(by_name[baseline])
    rows = {
        v.name: _summarize_variant(v, by_name[v.name], base_ok, v.name == baseline, refused.get(v.name), rule)
        for v in variants
    }
    ups = _speedup_readings(rows, rule) if ablation else {}
    extra = dict(extra or {})
    recommended = INTERRUPTED if extra.get("interrupted") else _recommend(baseline, rows, ups, run_steps)
    clash = set(extra) & {"baseline", "variants", "env", "speedups", "recommended"}
    if clash:
        raise ValueError(f"extra keys {sorted(clash)} would overwrite computed report keys")
    return Report(
        baseline=baseline,
        variants=list(rows.values()),
        env=dict(env or {}),
        speedups=ups,
        recommended=recommended,
        grain=evaluation_grain(trials, baseline),
        **extra,
    )


def evaluation_grain(trials: list[Trial], reference: str) -> float | None:
    """How coarsely the runs' own evaluations read their times to the target: the median gap between the
    evaluation that met it and the one before, over the reference's median time to it. A time ratio moves in
    steps about this size (None: no time to read)."""
    gaps = [gap for t in trials if (gap := _reading_gap(t)) is not None]
    times = [t.time_to_target_s for t in trials if t.variant == reference and t.time_to_target_s]
    return float(np.median(gaps) / np.median(times)) if gaps and times else None


def _reading_gap(trial: Trial) -> float | None:
    """The wall seconds between the evaluation at the trial's time to the target and the one before it."""
    if trial.time_to_target_s is None:
        return None
    walls = [e["wall_s"] for e in trial.target_evals or []]
    at = next((i for i, wall in enumerate(walls) if wall >= trial.time_to_target_s - 1e-9), None)
    return walls[at] - walls[at - 1] if at else None
