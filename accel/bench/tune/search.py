"""tune's search: one knob at a time, each stage measuring its candidates beside its reference, then a final check.

The trial runner is a parameter (`run_trials`, accel.bench.runner's by default), so the search can be driven by
simulated measurements.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from ...config.recipe import Recipe
from ...errors import AccelError
from ...io import strict_json, write_atomic
from ...measure.load import busy_note
from .. import runner
from ..decide import DEFAULT_RULE, Rounds, Rule
from ..isolation import held
from ..knobs import Knob, current, usable
from ..records import Reading, Report, Trial, VariantSummary, Verdict
from ..refused import new_refusals
from ..runner import SkipRule
from ..summary import summarize, undecided_variants
from ..trial_process import Launch, TrialSettings
from ..variants import Variant, format_value, interleave
from . import levers
from .budget import OBJECTIVE, Budget, WithinBudget
from .configs import RecipeSubject, Subject
from .lr_range import lr_range_knob
from .objective import Objective
from .rows import FinalCheck, TuneRow, final_check, skipped_row, stage_rows, unusable_rows
from .study import StudyRunner, StudySpec, default_storage, search_study, storage

MOST_ROUNDS = 100  # a stage's rounds at most, as bench's (its share of the budget ends it sooner)


class TrialRunner(Protocol):
    """Runs (trial, variant, recipe file or launch) jobs in order and returns every result
    (accel.bench.runner.run_trials)."""

    def __call__(
        self,
        jobs: list[tuple[int, str, Path | Launch]],
        out: Path,
        settings: TrialSettings,
        console: Console | None = None,
        skip: SkipRule | None = None,
    ) -> list[Trial]: ...


@dataclass
class TuneResult:
    """What tune measured (`rows`, one per candidate) and chose (`chosen`: dotted key -> value)."""

    chosen: dict[str, Any] = field(default_factory=dict)
    rows: list[TuneRow] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    final: FinalCheck | None = None  # the tuned configuration against the recipe as given, measured last
    compared: list[str] = field(default_factory=list)  # knobs with a candidate that ran beside the reference
    target: str | None = None  # --objective time: the target every time was measured to
    loads: list[dict[str, Any] | None] = field(
        default_factory=list
    )  # each trial's machine load (accel/measure/load.py)
    ran: list[Trial] = field(default_factory=list)  # every trial: what kept the user's files (`files`)
    interrupted: bool = False  # Ctrl-C, SIGTERM or SIGHUP ended the search: nothing was chosen
    # --objective time: each lever kept and its stage's time ratio against the choices before it (tune.levers)
    levers: list[tuple[str, Reading | None]] = field(default_factory=list)
    objective: str = "speed"  # what the search ranked by (accel.bench.tune.objective)

    @property
    def labels(self) -> dict[str, str]:
        """Dotted key -> the label of the value chosen for it."""
        return {r.knob: r.label for r in self.rows if r.knob in self.chosen and r.value == self.chosen[r.knob]}

    def trials_ran(self, trials: int) -> str:
        """The trials a candidate ran, as the fragment says it: `trials`, or up to the most an undecided stage
        added ("3 to 7")."""
        most = max((t.trial + 1 for t in self.ran if t.trial is not None), default=trials)
        return f"{trials}" if most <= trials else f"{trials} to {most}"

    @property
    def pruned(self) -> list[Trial]:
        """The trials the pruner stopped short of the target (accel.bench.pruner)."""
        return [t for t in self.ran if t.pruned]

    @property
    def saved_s(self) -> float:
        """The pruned trials' seconds to their deadlines: what the pruner saved at the least."""
        return sum(t.pruned_saved_s or 0.0 for t in self.pruned)

    def pruned_line(self) -> str | None:
        """`Pruned: 3 of 12 trials ...`, when the pruner stopped any."""
        if not self.pruned:
            return None
        timed = sum(t.target_evals is not None for t in self.ran)
        return (
            f"Pruned: {len(self.pruned)} of {timed} trials to the target stopped once they could not be sooner than "
            f"the reference beside them, about {_trial_time(self.saved_s)} saved (each one's time to its "
            "deadline); `--no-prune` runs every trial to its end."
        )

    @property
    def files(self) -> str | None:
        """What kept the user's files from a script's trials: "isolated", "restored 3 files"."""
        return held(self.ran)

    def to_data(self) -> dict[str, Any]:
        """tune.json."""
        return {
            "chosen": self.chosen,
            "rows": [r.to_data() for r in self.rows],
            "env": self.env,
            "final": self.final.to_data() if self.final else None,
            "target": self.target,
            "busy": busy_note(self.loads),
            **({"files": self.files} if self.files else {}),
            **({"shares": {name: r and r.model_dump() for name, r in levers.shares(self)}} if self.target else {}),
            **({"interrupted": True} if self.interrupted else {}),
            **({"pruned": {"trials": len(self.pruned), "saved_s": round(self.saved_s, 1)}} if self.pruned else {}),
        }


def _trial_time(seconds: float) -> str:
    """`1.1 trial-seconds`, `3.1 trial-minutes`: seconds of trials, however many ran at once."""
    return f"{seconds:.1f} trial-seconds" if seconds < 120 else f"{seconds / 60:.1f} trial-minutes"


@dataclass
class Measure:
    """How every stage runs its trials: one subject (recipe or script), settings, trial count, console, budget
    and runner."""

    subject: Subject
    settings: TrialSettings
    trials: int
    console: Console
    budget: Budget | None
    run_trials: TrialRunner
    objective: Objective = field(default_factory=Objective)
    loads: list[dict[str, Any] | None] = field(default_factory=list)  # every trial's machine load, shared by copies
    kind: str = OBJECTIVE  # the budget's kind of its trials (accel.bench.tune.budget)
    ran: list[Trial] = field(default_factory=list)  # every trial, shared by copies
    study: StudySpec | None = None  # --objective time: the study the learning stages' rounds run on
    add_rounds: bool = True  # an undecided stage adds rounds within its share of the budget

    def on_study(self) -> Measure:
        """How a learning stage runs its trials: as rounds of its study, by whichever worker takes each."""
        return replace(self, run_trials=StudyRunner(self.study, self.run_trials)) if self.study else self

    def run(
        self,
        jobs: list[tuple[int, str, Path | Launch]],
        out: Path,
        skip: SkipRule | None = None,
        reference: str | None = None,
    ) -> list[Trial]:
        """The jobs' trials; a learning stage's `reference`, first in each round, sets its candidates' deadlines."""
        settings = self.objective.settings(self.settings, reference)
        results = self.run_trials(jobs, out, settings, self.console, skip=skip)
        self.loads += [r.load for r in results]
        self.ran += results
        # Ctrl-C or SIGTERM ends the whole search, not only the stage it came in: no later stage runs, and no
        # choice rests on a stage cut short.
        if getattr(results, "interrupted", False):
            raise KeyboardInterrupt
        if getattr(results, "stopped", None):
            raise runner.TrialsStopped(results.stopped)
        return results


class StartFailed(AccelError):
    """Every trial of a stage's reference failed (`error`: the first one's): nothing can be compared with it."""

    def __init__(self, message: str, error: str | None = None):
        super().__init__(message)
        self.error = error or message


@dataclass
class Stage:
    """One knob's measurements: its variants, every trial of them, and the reference variant's name."""

    knob: Knob
    variants: list[Variant]
    trials: list[Trial]
    reference: str
    new_trials: list[Trial]  # the trials this stage ran (variants equal in effect share them)
    cut: bool = False  # ended early: its remaining trials would have overrun the budget
    rule: Rule = DEFAULT_RULE  # how its comparisons are read: the looks it planned, if it added rounds


def _candidates(knob: Knob, current: Any, traits: dict[str, bool]) -> list[Any]:
    if knob.speedup:  # off is the reference; the recipe's own setting is one of the candidates
        return usable(knob, traits)
    values: list[Any] = []
    for value in [current, *knob.values]:  # distinct, by equality: --try values may be lists
        if value not in values:
            values.append(value)
    return sorted(values) if knob.bounded else values


def _reference(knob: Knob, chosen: dict[str, Any], plain: dict) -> Any:
    return knob.values[0] if knob.speedup else current(knob.key, chosen, plain)


def _variant(knob: Knob, value: Any, chosen: dict[str, Any], plain: dict) -> Variant:
    label = knob.label(value)
    coupled = knob.couple(value, chosen, plain) if knob.couple else {}
    with_it = "".join(f" ({k}={format_value(v)})" for k, v in coupled.items() if v != current(k, chosen, plain))
    return Variant(f"{knob.key}={label}{with_it}", {**chosen, knob.key: value, **coupled})


def _variants(knob: Knob, chosen: dict[str, Any], plain: dict, traits: dict[str, bool]) -> list[Variant]:
    reference = _reference(knob, chosen, plain)
    return [_variant(knob, v, chosen, plain) for v in _candidates(knob, reference, traits)]


def _failed_bound(knob: Knob, names: dict[str, Any], current: Any) -> SkipRule:
    """A skip rule for run_trials: skip values at or above the smallest value that has failed (never the
    current value: it is what every other candidate is compared with)."""

    def skip(variant: str, results: list[Trial]) -> str | None:
        failed = [names[r.variant] for r in results if r.error and r.variant in names]
        if knob.bounded and failed and names[variant] >= min(failed) and names[variant] != current:
            return f"{knob.key}={min(failed)} failed, so larger values are not tried"
        return None

    return skip


def _refused(m: Measure, knob: Knob, variants: list[Variant], reference: Any) -> dict[str, str]:
    """The candidates the one conflict rule refuses beside the choices so far (name -> reason), known without a
    trial; a refusal the reference shares is the subject's own (accel.bench.refused.new_refusals)."""
    ref = next(v for v in variants if v.overrides[knob.key] == reference)
    return new_refusals({v.name: m.subject.refusals(v.overrides) for v in variants}, ref.name)


def _run_stage(
    m: Measure,
    knob: Knob,
    chosen: dict[str, Any],
    out: Path,
    traits: dict[str, bool],
    variants: list[Variant] | None = None,
    stages: int | None = None,
) -> Stage:
    """Measure every candidate of `knob` (or those `variants` of them) and its reference, interleaved, all in this
    stage; given the `stages` left (this one included), rounds are added while a comparison is undecided, within
    the stage's part of the budget left.

    The reference is measured again in every stage, never taken from an earlier one: a shared machine's speed
    drifts from minute to minute, and only trials run side by side compare (a reference measured at a fast
    moment, reused four stages later, made a worker setting equal to it in effect read 0.94x, "hurt")."""
    plain = m.subject.plain()
    reference = _reference(knob, chosen, plain)
    variants = variants if variants is not None else _variants(knob, chosen, plain, traits)
    keys = {v.name: m.subject.config_key(v.overrides) for v in variants}  # each resolves a recipe: computed once
    runs: dict[str, Variant] = {}  # config key -> the first variant making it
    for v in variants:
        runs.setdefault(keys[v.name], v)
    files = m.subject.inputs(list(runs.values()), out)
    names = {v.name: v.overrides[knob.key] for v in variants}
    ref_name = next(v.name for v in variants if v.overrides[knob.key] == reference)
    ref_run = runs[keys[ref_name]].name
    order = list(runs.values())
    if m.objective.time:  # the reference first in each round: its time to the target is its candidates' deadline
        order.sort(key=lambda v: v.name != ref_run)
    jobs = [(t, v.name, files[v.name]) for t, v in interleave(order, m.trials)]
    within = WithinBudget(m.budget, [name for _, name, _ in jobs], m.kind)
    failed_bound = _failed_bound(knob, names, reference)
    started = time.perf_counter()
    results = list(m.run(jobs, out, skip=_either(within, failed_bound), reference=ref_run))
    rule = DEFAULT_RULE
    if stages is not None and not within.cut and len(runs) > 1:
        rule = _rounds_until_decided(m, stages, started, runs, files, ref_run, results, out, failed_bound)
    measured = {key: [r for r in results if r.variant == v.name] for key, v in runs.items()}
    trials_of = [r.updated(variant=v.name) for v in variants for r in measured[keys[v.name]]]
    return Stage(knob, variants, trials_of, ref_name, results, cut=within.cut, rule=rule)


def _rounds_until_decided(
    m: Measure,
    stages: int,
    started: float,
    runs: dict[str, Variant],
    files: dict[str, Path | Launch],
    reference: str,
    results: list[Trial],
    out: Path,
    skip: SkipRule,
) -> Rule:
    """Rounds added for the candidates still undecided after the first `m.trials` and the reference, interleaved,
    at the looks planned from those rounds' time within an equal part of the budget left among the `stages` left
    (this one included), as bench adds them (decide.py's looks, so the intervals stay 95% ones), until each
    decides, the looks end or the budget would be overrun; `results` grows in place. Returns the rule the looks are
    read by (the default one where none are planned: no budget, or the time objective, which reads time to the
    target)."""
    left = m.budget.stage_seconds(stages, m.kind, results) if m.budget is not None and not m.objective.time else None
    if left is None:
        return DEFAULT_RULE
    # planned from the first rounds' own time (a trial's wall time, as the budget counts it), never their figures
    elapsed = max(time.perf_counter() - started, sum(t.wall_s or 0.0 for t in results))
    plan = Rounds(m.trials, MOST_ROUNDS, elapsed + left)
    rule = plan.rule(plan.looks(elapsed))
    done = m.trials
    for look in (look for look in rule.looks if look > done):
        wanted = undecided_variants(summarize(results, list(runs.values()), reference, rule=rule), [], rule)
        if not wanted:
            break
        names = [v.name for v in runs.values() if v.name in wanted]
        runner.say_added_rounds(m.console, rule, names, reference, (done + 1, look), "within the --budget")
        more = [(t, name, files[name]) for t in range(done, look) for name in names]
        within = WithinBudget(m.budget, [name for _, name, _ in more], m.kind)
        results += m.run(more, out, skip=_either(within, skip))
        done = look
        if within.cut:
            break
    return rule


def _either(*rules: SkipRule) -> SkipRule:
    """Skips what any of `rules` skips, asking them in order (a WithinBudget counts the jobs it is asked about)."""
    return lambda variant, done: next((why for rule in rules if (why := rule(variant, done))), None)


def _passed_over(r: VariantSummary, planned_steps: int | None, guard: bool) -> str | None:
    """Why a variant that measurably helped is still not chosen, or None."""
    if guard and r.result_changed:
        return "faster, but its training loss moved beyond noise: check it before using it"
    if r.median_step_verdict not in (Verdict.HELPED, None):
        return (
            f"faster on average but not by median step times "
            f"({r.median_step_ratio.text('{:.2f}', 'x')}): the gain is in a few steps"
        )
    even = r.break_even_steps
    if planned_steps and even is not None and even > planned_steps:
        return f"repays its start-up after {even:.0f} steps; the run has {planned_steps}"
    return None


def _pick(
    report: Report, baseline: str, planned_steps: int | None, guard: bool
) -> tuple[VariantSummary, dict[str, str]]:
    """The fastest variant that measurably helped, by its mean throughput and by its median step both, left the
    training loss as it was (within noise; with `guard`: a speed-up must not change results, a batch size does)
    and repays its start-up within the planned run, else the baseline; and why each faster one was passed over.

    Both readings must agree because each misleads alone on a shared machine: one stalled step in a reference
    trial makes any candidate's mean look faster (a CPU's default attention kernel once read 1.66x), while the
    median step alone would miss a cost that hits only some steps (a loader falling behind now and then)."""
    helped = [r for r in report.variants if r.verdict == Verdict.HELPED and not r.errors]
    passed = {r.name: why for r in helped if (why := _passed_over(r, planned_steps, guard))}
    best = max((r for r in helped if r.name not in passed), key=lambda r: r.samples_per_s.median, default=None)
    return best or report.variant(baseline), passed


def _search_knob(
    m: Measure, result: TuneResult, knob: Knob, out: Path, traits: dict[str, bool], stages: int = 1
) -> None:
    """One stage of `stages` left: measure `knob`'s candidates (unless they would overrun the budget), adding rounds
    within its share of the budget while one is undecided, and record the choice."""
    plain = m.subject.plain()
    variants = _variants(knob, result.chosen, plain, traits)
    reference = _reference(knob, result.chosen, plain)
    result.rows += unusable_rows(knob, traits)
    refused = _refused(m, knob, variants, reference)
    result.rows += [
        skipped_row(knob.key, v.overrides[knob.key], v.name, f"refused, not run: {refused[v.name]}")
        for v in variants
        if v.name in refused
    ]
    variants = [v for v in variants if v.name not in refused]
    if len(variants) < 2:
        return
    if not m.budget.allows(len({m.subject.config_key(v.overrides) for v in variants}) * m.trials, m.kind):
        result.rows += [
            skipped_row(knob.key, v.overrides[knob.key], v.name, "not measured: over the --budget")
            for v in variants
            if v.overrides[knob.key] != reference
        ]
        return
    stage = _run_stage(m, knob, result.chosen, out, traits, variants, stages if m.add_rounds else None)
    m.budget.record(stage.new_trials, m.kind)
    if not any(t.error is None for t in stage.trials if t.variant == stage.reference):
        raise StartFailed(
            f"tune: the starting configuration ({stage.reference}) failed; fix the recipe first "
            f"(trial logs under {out.parent}).",
            next((t.error for t in stage.trials if t.error), None),
        )
    trials = m.objective.read(stage.trials, stage.reference)
    report = summarize(trials, stage.variants, stage.reference, rule=stage.rule)
    if m.objective.time:
        best, passed = m.objective.pick(report)
        if best is not None:
            result.levers.append((best.name, best.time_to_target_ratio))  # a ladder's rungs apart
        best = best or report.variant(stage.reference)
    else:
        best, passed = _pick(report, stage.reference, m.subject.planned_steps(trials), guard=knob.speedup or knob.guard)
    result.chosen.update(best.overrides)  # the knob's value and any key it carries (a batch size's learning rate)
    if any(t.variant != stage.reference for t in trials):
        result.compared.append(knob.key)
    result.env = result.env or next((t.env for t in trials if t.env), {})
    result.rows += stage_rows(stage.knob.key, report, stage.reference, best.name, passed, stage.cut, stage.trials)
    _say_progress(m, knob.key, best, best.name == stage.reference, len(stage.new_trials))


def _say_progress(m: Measure, key: str, best: VariantSummary, kept: bool, trials: int) -> None:
    """A line after each stage: what it chose (with its time to the target under --objective time), the trials it
    ran, and what is left of the budget."""
    sooner = f", {best.time_to_target_s:.0f} s to the target" if m.objective.time and best.time_to_target_s else ""
    left = m.budget.left_s()
    budget = f"; {int(left // 60)} min {int(left % 60)} s of the --budget left" if left is not None else ""
    m.console.print(
        f"{key}: {'kept' if kept else 'chose'} {best.name}{sooner} after {trials} trial(s){budget}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


def tune(
    base: Recipe | Subject,
    knobs: list[Knob],
    work: str | Path,
    settings: TrialSettings,
    trials: int = 2,
    console: Console | None = None,
    budget_s: float | None = None,
    final_check: bool = False,
    run_trials: TrialRunner = runner.run_trials,
    objective: Objective | None = None,
    study: StudySpec | None = None,
    add_rounds: bool = True,
) -> TuneResult:
    """Search `knobs` in order by measurement (trials under `work`, run by `run_trials`); the chosen values and
    every measurement. `base`: a recipe, or a script (accel.bench.tune.script.ScriptSubject). A knob whose trials
    would overrun `budget_s` is left as given. With `final_check`, the tuned configuration then runs against the
    one as given, in time kept back from the budget for it; measured slower, the one as given is the result:
    tuning never leaves a user below where they started. `objective`: what a candidate must improve (samples/s by
    default; time to a target). `study`: where the time objective's learning stages keep their rounds and who runs
    them (accel.bench.tune.study; default: a SQLite file in `work`, run here). `add_rounds`: a stage still
    undecided after its `trials` rounds adds rounds within its share of `budget_s` (False: `trials` exactly)."""
    work = Path(work)
    objective = objective or Objective()
    if objective.time:
        study = study or StudySpec(default_storage(work), "tune")
        search_study(study, storage(study), done=False)  # the tune extra is asked for now, before any trial
    shares = {levers.SPEED: levers.SPEED_SHARE} if objective.time else None
    budget = Budget(budget_s, reserve=2 * trials if final_check else 0, shares=shares)
    subject = RecipeSubject(base) if isinstance(base, Recipe) else base
    console = console or Console(stderr=True)
    m = Measure(subject, settings, trials, console, budget, run_trials, objective, study=study, add_rounds=add_rounds)
    result = TuneResult(loads=m.loads, ran=m.ran, objective=objective.name)
    try:
        _search(m, result, knobs, work, final_check)
    except (KeyboardInterrupt, runner.TrialsStopped):  # the record says so, and what was measured (nothing chosen)
        result.interrupted, result.chosen = True, {}
        _write_record(result, work, objective)
        raise
    finally:
        if study is not None:  # its workers end with it
            search_study(study, storage(study), done=True)
    _write_record(result, work, objective)
    return result


def _write_record(result: TuneResult, work: Path, objective: Objective) -> None:
    result.target = str(objective.target) if objective.target else None  # a default target is set by the search
    if objective.target is not None:  # every trial's time to it, those run before it was known too (tune.html)
        result.ran[:] = objective.read(result.ran, reference="")
    work.mkdir(parents=True, exist_ok=True)
    write_atomic(work / "tune.json", strict_json(result.to_data(), indent=2) + "\n")  # NaN as null: any parser


def _search(m: Measure, result: TuneResult, knobs: list[Knob], work: Path, final_check: bool) -> None:
    traits, failed = {}, None
    # --objective time: the speed-ups by samples/s, then together to the target, then the learning knobs on top
    speed = levers.speed_measure(m) if m.objective.time else m
    if any(need for knob in knobs for need in knob.needs):  # a trial of the recipe reports the model's traits
        traits, failed = _model_traits(speed, knobs[0], work / "reference")
    speed_keys = [knob.key for knob in knobs if levers.speeds(knob)] if m.objective.time else []
    for i, knob in enumerate(knobs):
        out = work / f"{i}-{knob.key}"
        if speed_keys and levers.speeds(knob):
            # a short throughput trial the configuration as given cannot run (a script ending before its steps)
            # leaves the speed-ups as given: the learning knobs are still searched
            if failed is None:
                try:
                    _search_knob(speed, result, knob, out, traits, stages=len(speed_keys) - speed_keys.index(knob.key))
                except StartFailed as err:
                    failed = err.error
            continue
        if speed_keys:  # the first learning knob: the speed-ups to the target first
            levers.by_time(m, result, speed_keys, work / levers.KEY, failed)
            speed_keys = []
        if knob.range_test:
            knob, rows = lr_range_knob(m, result.chosen, out / "range-test")
            result.rows += rows
        for rung in itertools.count(1):
            if knob is None:
                break
            given = _reference(knob, result.chosen, m.subject.plain())
            where = out if rung == 1 else work / f"{i}-{knob.key}-{rung}"
            _search_knob(m.on_study(), result, knob, where, traits, stages=len(knobs) - i)
            knob = _next_rung(knob, given, result.chosen.get(knob.key))
    if speed_keys:  # speed-ups alone
        levers.by_time(m, result, speed_keys, work / levers.KEY, failed)
    if final_check and m.subject.config_key(result.chosen) != m.subject.config_key({}):  # what tuning bought
        m.budget.reserve = 0
        result.final = _final_check(m, result, work / "final")
        if result.final and result.final.slower:
            # knobs chosen one by one, slower together (by either reading: tuning must never cost speed)
            result.final.reverted, result.chosen = dict(result.chosen), {}


def _next_rung(knob: Knob, given: Any, chosen: Any) -> Knob | None:
    """A ladder knob whose winner was its candidate furthest from the value it was measured against (`given`):
    the next value that way (`knob.ladder` times further), measured against the winner; None otherwise."""
    tried = [given, *knob.values]
    if knob.ladder is None or chosen is None or chosen == given or chosen not in (min(tried), max(tried)):
        return None
    step = knob.ladder if chosen > given else 1 / knob.ladder
    return replace(knob, values=[float(f"{chosen * step:.4g}")], labels=[])


def _model_traits(m: Measure, first: Knob, out: Path) -> tuple[dict[str, bool], str | None]:
    """One trial of the first knob's reference configuration, for the model traits it reports, so no stage tries
    a candidate the model cannot use (its speed is not compared with anything); and its error, if it failed."""
    value = _reference(first, {}, m.subject.plain())
    reference = Knob(first.key, [value], speedup=first.speedup, labels=first.labels[:1])
    stage = _run_stage(replace(m, trials=1, budget=None), reference, {}, out, {})
    m.budget.record(stage.new_trials, m.kind)
    traits = next((t.model_traits for t in stage.trials if t.model_traits), {})
    return traits, next((t.error for t in stage.trials if t.error), None)


def _final_check(m: Measure, result: TuneResult, out: Path) -> FinalCheck | None:
    """The tuned configuration against the subject as given, interleaved: what tuning bought, in one run."""
    if not m.budget.allows(2 * m.trials, m.kind):
        return None
    given = m.subject.given
    variants = [Variant(given), Variant("tuned", m.subject.effective(result.chosen))]  # no `key: null`
    files = m.subject.inputs(variants, out)
    started = time.perf_counter()
    done = m.run([(t, v.name, files[v.name]) for t, v in interleave(variants, m.trials)], out)
    rule = DEFAULT_RULE
    if m.add_rounds:  # undecided, it takes what the budget has left, as a stage does
        runs = {v.name: v for v in variants}
        rule = _rounds_until_decided(m, 1, started, runs, files, given, done, out, lambda variant, trials: None)
    report = summarize(m.objective.read(done, given), variants, given, rule=rule)
    return final_check(report.variant("tuned"), report.variant(given), report.grain)
