"""tune's result rows: one per candidate measured, skipped or left out, and the final check's reading."""

from __future__ import annotations

from typing import Any

from ..knobs import TRAITS, Knob
from ..records import Interval, Reading, Record, Report, Trial, VariantSummary, Verdict, busy_fields
from ..summary import MIN_TRIALS

NOT_RUN = "not run (a smaller value failed)"
NOT_TRUSTED, NO_VERDICT = "not trusted", "not chosen: no verdict"
UNJUDGED = (NOT_TRUSTED, NO_VERDICT)  # how the notes of a candidate measured but not judged begin


class TuneRow(Record):
    """One candidate of one knob, as tune.json and the table show it. A candidate that never ran has only
    medians of None and no median-step ratio."""

    knob: str
    value: Any
    label: str
    samples_per_s: Interval
    ratio: Interval
    verdict: Verdict | None
    median_step_ratio: Interval | None = None
    note: str
    # --objective time: median seconds to the target, the ratio to the reference's (below 1: sooner), and how many
    # trials reached it
    time_to_target_s: float | None = None
    time_ratio: Reading | None = None
    target_reached: int | None = None
    # a speed-up's steps to repay its start-up (a compilation) in its stage, when it measurably helped
    break_even_steps: float | None = None
    against: str | None = None  # the label of the reference its ratios are to (a ladder's rungs each have their own)


class FinalCheck(Record):
    """The tuned configuration against the recipe as given, measured last; `reverted` holds the choice that was
    undone when it measured slower (by time to the target under --objective time: `time_ratio`)."""

    samples_per_s: Interval
    ratio: Interval
    verdict: Verdict | None
    median_step_ratio: Interval
    median_step_verdict: Verdict | None
    busy: float | None = None  # the machine was busy during its trials: others' largest share; no verdict
    undecided: float | None = None  # its interval could not decide at this resolution (decide.py)
    reverted: dict[str, Any] | None = None
    # --objective time: the tuned time to the target over the recipe's, and how many trials of each reached it
    time_ratio: Reading | None = None
    reached: dict[str, str] | None = None  # {"tuned": "2/2", "recipe as given": "2/2"}
    given: str = "recipe as given"  # what the tuned configuration was measured against ("script as given")
    grain: float | None = None  # --objective time: the evaluations' spacing over the given's time to the target

    @property
    def slower(self) -> bool:
        """Speed: hurt by either reading, since tuning must never cost speed. Time: not measured sooner on the
        median, or short of the target in a trial, since a change to how a model learns must earn its place."""
        if self.reached is not None:
            ratio, (done, of) = self.time_ratio, self.reached["tuned"].split("/")
            return ratio is None or ratio.median is None or ratio.median >= 1 or done != of
        return Verdict.HURT in (self.verdict, self.median_step_verdict)


def final_check(tuned: VariantSummary, recipe: VariantSummary, grain: float | None = None) -> FinalCheck:
    timed = tuned.target_reached is not None
    return FinalCheck(
        samples_per_s=tuned.samples_per_s,
        ratio=tuned.ratio_vs_baseline,
        verdict=tuned.verdict,
        median_step_ratio=tuned.median_step_ratio,
        median_step_verdict=tuned.median_step_verdict,
        **busy_fields(tuned.busy),
        undecided=tuned.undecided,
        time_ratio=tuned.time_to_target_ratio if timed else None,
        reached={"tuned": _reached(tuned), recipe.name: _reached(recipe)} if timed else None,
        given=recipe.name,
        grain=grain,
    )


def _reached(r: VariantSummary) -> str:
    return f"{r.target_reached or 0}/{len(r.trials)}"


def skipped_row(key: str, value: Any, name: str, note: str) -> TuneRow:
    return TuneRow(
        knob=key,
        value=value,
        label=name.partition("=")[2],
        samples_per_s=Interval(median=None),
        ratio=Interval(median=None),
        verdict=None,
        note=note,
    )


def unusable_rows(knob: Knob, traits: dict[str, bool]) -> list[TuneRow]:
    """A row for each value the model cannot use (a trait it lacks), saying which."""
    gone = [(v, need) for v, need in zip(knob.values, knob.needs) if need and not traits.get(need, True)]
    return [
        skipped_row(knob.key, v, f"{knob.key}={knob.label(v)}", f"not tried: the model has no {TRAITS[need]}")
        for v, need in gone
    ]


def _note(key: str, r: VariantSummary, current: str, best: str, passed: dict[str, str]) -> str:
    note = "chosen" if r.name == best else passed.get(r.name, "")
    if r.name == current and r.name != best:
        note = "reference (off)" if key.startswith("speedups.") else "current"
    timed = r.time_to_target_ratio
    faster = (timed.median or 2) < 1 if timed else (r.ratio_vs_baseline.median or 0) > 1
    # why a candidate measured beside the others was not judged; one whose every trial failed has no reading
    unjudged = r.ok_trials > 0 and r.name not in (best, current)
    if unjudged and r.verdict is None and faster and r.ok_trials < MIN_TRIALS:
        note = f"{NOT_TRUSTED}: fewer than {MIN_TRIALS} trials"
    elif unjudged and r.busy is not None:
        note = f"{NO_VERDICT}, the machine was busy during the trials (others took {r.busy:.0%} of the cores)"
    elif unjudged and r.undecided and r.verdict is None:
        note = f"{NO_VERDICT}, undecided at +-{r.undecided:.0%}: its interval {r.ratio_vs_baseline.text()} is wider"
    failed = [t.error for t in r.trials if t.error]
    if not r.trials:
        note = NOT_RUN
    elif failed:
        last = [ln for ln in failed[0].strip().splitlines() if ln.strip()] or ["?"]
        note = (note + "; " if note else "") + f"{len(failed)} failed: {last[-1][:120]}"
    if r.unsteady:  # its figures rest on trials at two speeds
        note = (note + "; " if note else "") + r.unsteady_said
    if stopped := sum(bool(t.pruned) for t in r.trials):
        note = (note + "; " if note else "") + f"pruned in {stopped} of {len(r.trials)}: it could not be sooner"
    return note


def measured_row(
    key: str,
    r: VariantSummary,
    current: str = "",
    best: str = "",
    passed: dict[str, str] | None = None,
    note: str | None = None,
    value: Any = None,
) -> TuneRow:
    """The row of a candidate that was in a stage: its figures and why it was (not) chosen (`note`, when the
    stage says so itself; `value`, when the candidate is more than one key's value)."""
    return TuneRow(
        knob=key,
        value=r.overrides[key] if value is None else value,
        label=r.name.partition("=")[2],
        samples_per_s=r.samples_per_s,
        ratio=r.ratio_vs_baseline,
        verdict=r.verdict,
        median_step_ratio=r.median_step_ratio,
        note=_note(key, r, current, best, passed or {}) if note is None else note,
        time_to_target_s=r.time_to_target_s,
        time_ratio=r.time_to_target_ratio,
        target_reached=r.target_reached,
        break_even_steps=r.break_even_steps,
        against=current.partition("=")[2] if current else None,
    )


CUT = "stage ended early: over the --budget"
ALONE = "kept: nothing else was measured beside it"


def stage_rows(
    key: str,
    report: Report,
    reference: str,
    best: str,
    passed: dict[str, str],
    cut: bool = False,
    trials: list[Trial] = (),
) -> list[TuneRow]:
    """A stage's rows; `cut`: the budget ended it early, and a candidate with no trial was cut, not bounded by a
    smaller value's failure, unless one of its `trials` failed."""
    rows = [measured_row(key, r, reference, best, passed) for r in report.variants]
    if sum(r.samples_per_s.median is not None for r in rows) < 2:  # a choice needs another candidate beside it
        rows = [r.model_copy(update={"note": ALONE}) if r.note == "chosen" else r for r in rows]
    if not cut:
        return rows
    failed = any(t.error for t in trials)
    return [
        r.model_copy(
            update={"note": "; ".join(filter(None, ["not run" if r.note == NOT_RUN and not failed else r.note, CUT]))}
        )
        for r in rows
    ]
