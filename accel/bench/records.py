"""The bench's records as types: a trial's result, an interval, a verdict, a variant's summary, a report.

JSON appears only where a record crosses a process or a file: a trial process writes its `Trial`, the runner
reads it back, the report is written as report.json (docs/bench.md names its fields). Everything between works
on these objects. A record keeps the keys it was given and no others (`to_json` leaves unset fields out), so a
failed trial stays `{"variant", "trial", "error", ...}` and report.json holds what it always held.
"""

from __future__ import annotations

import json
import math
import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(: |$)")  # `AccelError: ...` in a traceback


class Verdict(StrEnum):
    """What a throughput ratio's interval says about a variant against its baseline."""

    HELPED = "helped"
    NO_EFFECT = "no effect"
    HURT = "hurt"
    MIXED = "mixed"  # only for a speed-up whose two ablation readings disagree


class Record(BaseModel):
    """A record: unknown keys are errors (a misspelt field fails where it is written, not where it is read)."""

    model_config = ConfigDict(extra="forbid")

    def to_data(self) -> dict[str, Any]:
        """Plain JSON-able data: the fields that were set, non-finite numbers as null (JSON has no NaN)."""
        return _finite(self.model_dump(mode="json", exclude_unset=True))


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}  # as float() and JavaScript spell them


def _tagged(x: Any) -> Any:
    """`x` with every non-finite float, however deeply nested, as its NON_FINITE string."""
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if math.isnan(x) else "Infinity" if x > 0 else "-Infinity"
    if isinstance(x, dict):
        return {k: _tagged(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_tagged(v) for v in x]
    return x


def _untagged(x: Any) -> Any:
    if isinstance(x, str):
        return NON_FINITE.get(x, x)
    if isinstance(x, dict):
        return {k: _untagged(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_untagged(v) for v in x]
    return x


class Interval(Record):
    """A median and its bootstrap 95% interval; both None when nothing was measured."""

    median: float | None = None
    ci95: tuple[float, float] | None = None

    def text(self, fmt: str = "{:.2f}", unit: str = "x") -> str:
        """`1.25x [1.10, 1.40]`; n/a when nothing was measured."""
        if self.median is None:
            return "n/a"
        ci = " [{}, {}]".format(*(fmt.format(x) for x in self.ci95)) if self.ci95 is not None else ""
        return fmt.format(self.median) + unit + ci


class Reading(Interval):
    """A ratio with the verdict its interval gives (None: too few trials, nothing measured, or `busy`)."""

    verdict: Verdict | None = None
    # set only when the machine was busy during the trials compared (accel/measure/load.py): others' largest share of
    # the cores, for which the verdict is withheld
    busy: float | None = None
    # set only when the interval could not decide at the resolution asked (accel/bench/decide.py): that resolution,
    # and about how many trials a side a fixed design would need to decide it on this noise
    undecided: float | None = None
    trials_needed: int | None = None


class Trial(Record):
    """One trial's result: what the trial process measured (`accel.bench.trial`), then the runner's bookkeeping.
    A failed trial holds `error` and whatever was measured before it failed."""

    # NaN must survive the trial's JSON: a diverged loss reads as diverged, not as missing. The file holds it as
    # the string "NaN" (JSON has no NaN; a bare NaN stops strict parsers), which validation reads back as a float
    model_config = ConfigDict(extra="forbid", allow_inf_nan=True, ser_json_inf_nan="constants")

    variant: str | None = None
    trial: int | None = None
    error: str | None = None
    samples_per_s: float | None = None
    median_step_samples_per_s: float | None = None
    tokens_per_s: float | None = None
    step_times_s: list[float] | None = None
    data_wait_fraction: float | None = None
    setup_s: float | None = None
    first_step_s: float | None = None
    warmup_s: float | None = None
    # leading timed steps that were one-off costs, moved into the warm-up (accel/bench/trial_figures.py: steady);
    # `window_note`: a cut not made (too few steps would be left), or a window shorter than --window asked
    warmup_cut: int | None = None
    window_note: str | None = None
    final_loss: float | None = None
    steps: int | None = None
    peak_memory_mb: float | None = None
    flops_per_step: int | float | None = None
    flop_per_s: float | None = None
    mfu: float | None = None
    mfu_of: str | None = None  # the dtype whose peak the MFU is of: bf16, tf32, fp32...
    val_accuracy: float | None = None
    val_metric_name: str | None = None
    val_metric: float | None = None
    batch_size: int | None = None
    grad_accum: int | None = None
    build_s: float | None = None
    wall_s: float | None = None
    skipped_speedups: dict[str, str] | None = None
    lint: list[dict[str, Any]] | None = None
    compile_s: float | None = None
    graph_breaks: int | None = None
    recompiles: int | None = None
    model_traits: dict[str, bool] | None = None
    steps_per_epoch: int | None = None
    # the optimizer steps an unchanged script's real run takes, as its framework declares them (an HF Trainer's
    # max_steps, Lightning's estimated stepping batches): what a start-up cost must be repaid within
    run_steps: int | None = None
    env: dict[str, Any] | None = None
    time_to_target_s: float | None = None
    target_evals: list[dict[str, Any]] | None = None
    pruned: str | None = None  # why tune's pruner stopped it short of the target (accel.bench.pruner)
    pruned_saved_s: float | None = None  # and the seconds to its deadline it did not run
    unlogged_metric: str | None = None  # the metric a target needs, which the script never logged: the bench stops
    step_losses: list[float] | None = None  # each optimizer step's training loss, warm-up included
    # an unchanged script's one-off costs, out of its steps (accel/trial/instrument): evaluation, checkpoint writes
    eval_s: float | None = None
    save_s: float | None = None
    load: dict[str, Any] | None = None  # the machine's load over the timed steps (accel/measure/load.py)
    # what an unchanged script made under its own output options (`--output`), sent to the trial's own folder
    # (accel/trial/instrument/parsers.py): by option, the path given and the folders and files made there
    script_outputs: dict[str, dict[str, Any]] | None = None
    # the runner's, added in the parent process
    index: int | None = None
    started_at: float | None = None
    process_s: float | None = None
    log: str | None = None
    # what kept the user's files from a script's trial (accel/bench/isolation.py): "isolated", "restored 3 files"
    files: str | None = None
    files_restored: int | None = None
    # the trial's steps were measured in a process the script started (its command), which accel ended there
    measured_in: str | None = None
    # forked from its variant's zygote (accel/bench/zygotes.py), whose imports took these seconds once: the trial's
    # start-up figures are from its fork on, those imports left out
    forked_s: float | None = None

    @property
    def ok(self) -> bool:
        """Ran and measured a usable throughput; anything else counts as failed."""
        sps = self.samples_per_s
        return self.error is None and sps is not None and math.isfinite(sps) and sps > 0

    def error_said(self, limit: int = 400) -> str:
        """What the failure says, on one line: a traceback's own message whole (an error of several lines, such
        as the conflict rule's, reads from its first line, not just its last), else the error's first line."""
        lines = [ln.rstrip() for ln in (self.error or "trial reported no samples_per_s").strip().splitlines()]
        lines = [ln for ln in lines if ln.strip()] or ["(empty error)"]
        if lines[0].startswith("Traceback"):
            # the exception's own text begins at the last unindented `Name: ...` line after the frames
            starts = [i for i, ln in enumerate(lines) if _EXCEPTION_LINE.match(ln)]
            said = " ".join(ln.strip() for ln in lines[starts[-1] if starts else -1 :])
        else:
            said = lines[0]
            if said.endswith("last output:") and len(lines) > 1:  # a process that died: its last words
                said += " " + lines[-1].strip()
        return said if len(said) <= limit else said[: limit - 3] + "..."

    def updated(self, **fields: Any) -> Trial:
        """A copy with `fields` set (and so written), validated like the rest."""
        return Trial.model_validate(self.model_dump(exclude_unset=True) | fields)

    def without(self, *names: str) -> Trial:
        return Trial.model_validate(self.model_dump(exclude_unset=True, exclude=set(names)))

    def to_json(self) -> str:
        """The trial process's output, strict JSON: a non-finite number as the string "NaN", "Infinity" or
        "-Infinity", which reading it back (`model_validate_json`) turns into the float again, in a typed field
        or nested in one of any type (`target_evals`)."""
        return json.dumps(_tagged(self.model_dump(exclude_unset=True)), default=str, allow_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _untag(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        text = {name for name, f in cls.model_fields.items() if f.annotation == str | None}  # an error says "NaN"
        return {k: v if k in text else _untagged(v) for k, v in data.items()}


class VariantSummary(Record):
    """One variant's figures over its trials (docs/bench.md says what each means)."""

    name: str
    overrides: dict[str, Any]
    samples_per_s: Interval
    tokens_per_s: float | None
    flop_per_s: float | None
    mfu: float | None
    time_to_target_s: float | None
    mfu_of: str | None = None  # the dtype whose peak the MFU is of
    target_reached: int | None
    # the variant's time to the target over the baseline's (below 1: sooner), its verdict read like a speed-up's
    time_to_target_ratio: Reading | None = None
    ratio_vs_baseline: Interval
    verdict: Verdict | None
    # set only when the machine was busy during this variant's or the baseline's trials: others' largest share of
    # the cores; every verdict of the variant is then withheld (None), its figures kept
    busy: float | None = None
    # set only when its throughput interval could not decide at the resolution asked: that resolution (decide.py)
    undecided: float | None = None
    median_step_ratio: Interval
    median_step_verdict: Verdict | None
    step_time_p50_s: float | None
    step_time_p90_s: float | None
    data_wait_fraction: float | None
    peak_memory_mb: float | None
    compile_s: float | None
    first_step_s: float | None
    warmup_s: float | None
    break_even_steps: float | None
    # the one-off costs a framework's samples/s mixes in, out of the steps: the start-up (`build_s`: the process's
    # start to its trainer built, its engine made, or its training begun), and the time a trial spent evaluating
    # and writing checkpoints (a script's, where it does)
    build_s: float | None = None
    eval_s: float | None = None
    save_s: float | None = None
    final_loss: float | None
    val_accuracy: float | None
    val_metric_name: str | None
    val_metric: float | None
    result_changed: bool | None
    lint: list[dict[str, Any]]
    errors: int
    ok_trials: int
    trials: list[Trial]
    refused: str | None = None  # why the one conflict rule refused the variant beside the others' choices: not run
    # set only when its trials disagree: the slowest and the fastest trial's samples/s (summary.UNSTEADY)
    unsteady: tuple[float, float] | None = None

    @property
    def unsteady_range(self) -> str:
        """Its slowest to fastest trial's samples/s, as "21,761-42,634" ("" for a steady variant)."""
        return f"{self.unsteady[0]:,.0f}-{self.unsteady[1]:,.0f}" if self.unsteady else ""

    @property
    def unsteady_said(self) -> str:
        """The unsteady flag in words ("" for a steady variant)."""
        return f"unsteady: trials {self.unsteady_range} samples/s" if self.unsteady else ""

    @property
    def ratio_reading(self) -> Reading:
        said = {"undecided": self.undecided} if self.undecided else {}
        return Reading(**self.ratio_vs_baseline.model_dump(), verdict=self.verdict, **busy_fields(self.busy), **said)

    @property
    def median_step_reading(self) -> Reading:
        steady = self.median_step_ratio.model_dump()
        return Reading(**steady, verdict=self.median_step_verdict, **busy_fields(self.busy))


def busy_fields(share: float | None) -> dict[str, float]:
    """`busy=share` as keyword arguments when the machine was busy; nothing otherwise, so the field stays unset
    (and out of report.json) on a quiet machine."""
    return {} if share is None else {"busy": share}


class SpeedupReadings(Record):
    """An ablated speed-up read twice: +NAME vs baseline, and all vs -NAME; `verdict` is MIXED when they disagree."""

    added: Reading
    removed: Reading | None
    verdict: Verdict | None


class Recommendation(Record):
    overrides: dict[str, Any]
    text: str
    run_with: str | None = None  # the command that runs the recommendation (none: the baseline as it is)


class BenchSettings(Record):
    """How the bench's trials ran, as `accel bench` was asked."""

    steps: int
    warmup: int
    trials: int
    timeout_s: float | None
    compile_cache: str
    target: str | None
    eval_every: int | None
    sync: str = "step"  # set only for --sync window (the device synchronised around the timed steps only)
    window_s: float | None = None  # set only with a window by time (--window): seconds of timed steps at least
    # the real run's optimizer steps a recommendation must repay its start-up within, and where that came from
    run_steps: int | None = None
    run_steps_from: str | None = None
    # the one decision rule's (accel/bench/decide.py): the resolution its verdicts answer, the rounds run, and for a
    # bench that added rounds until it decided, the most it could run and the looks it planned
    resolution: float | None = None
    rounds: int | None = None
    max_trials: int | None = None
    looks: list[int] | None = None


class RevisionRecord(Record):
    """A revision a bench compared (accel/bench/revisions.py): its variants are named `name` (`name,VARY` with
    --vary); `commit` is the full hash (the working tree's HEAD for `.`, then `dirty` when it has changes)."""

    spec: str
    name: str
    label: str  # short hash and subject, as the report names it
    commit: str | None
    subject: str
    date: str | None
    dirty: bool = False


class RevisionReading(Record):
    """One revision's variant against the same variant of the first revision (accel/bench/rev_compare.py)."""

    variant: str
    against: str
    ratio: Reading
    result_changed: bool | None
    said: str  # "B is 7% slower than A [4%, 10%]"


class Report(Record):
    """report.json: the variants' summaries, with what ran and where. `accel bench` sets every field; a report
    made for tune's own comparisons leaves the run's context (recipe, settings, command, ...) unset."""

    baseline: str
    variants: list[VariantSummary]
    env: dict[str, Any]
    speedups: dict[str, SpeedupReadings]
    recommended: Recommendation
    recipe: str | None = None
    started: str | None = None
    finished: str | None = None
    interrupted: bool = False
    stopped: str | None = None  # why the bench refused its remaining trials (accel/bench/trial_figures.never_logged)
    trials_planned: int | None = None
    settings: BenchSettings | None = None
    recipes: dict[str, dict[str, Any]] | None = None
    command: str | None = None
    # set only for a bench of revisions (--rev, --bisect): which ones, and each read against the first
    revisions: list[RevisionRecord] | None = None
    revision_readings: list[RevisionReading] | None = None
    files: str | None = None  # what kept the user's files from a script's trials: "isolated", "restored 3 files"
    grain: float | None = None  # with a target: the evaluations' spacing over the baseline's time to it (summary)

    def variant(self, name: str) -> VariantSummary:
        return next(v for v in self.variants if v.name == name)

    @property
    def by_name(self) -> dict[str, VariantSummary]:
        return {v.name: v for v in self.variants}
