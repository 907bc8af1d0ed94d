"""Run an A/B bench: resolve variants into recipe files, run interleaved trials in fresh processes, report.

Each trial is `python -m accel.bench.trial` in its own process (and process group, so a timeout kills its
DataLoader workers too), so no global state, allocator pool or warm cache leaks from one trial into the next;
it dies with the bench (`signals.die_with_parent`), even one killed by SIGKILL.
Compilation caches are cold by default (a fresh TORCHINDUCTOR_CACHE_DIR per trial, under OUT/trials, removed
after it, so a killed bench leaves nothing outside OUT): the compile time a user pays on a new machine is part
of the honest price of `torch.compile`. `warm_cache` shares one cache under OUT.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ..errors import AccelError
from ..runs.signals import handled, leave_closed_terminal
from .decide import Rounds, Rule, fixed_rounds
from .isolation import Room, held
from .plan import BenchPlan, slug, write_recipes
from .pruner import PRUNE_SLACK
from .real_run import run_steps, run_with
from .records import Recommendation, Report, RevisionRecord, Trial
from .report import write_reports
from .rev_compare import read_revisions
from .summary import summarize, undecided_variants
from .trial_figures import never_logged
from .trial_process import Launch, TrialSettings, run_trial_process, trial_argv, trial_env
from .variants import Variant, interleave
from .zygotes import RECIPE_PRELOAD, Zygote, Zygotes

SkipRule = Callable[[str, list], "str | None"]


class TrialsStopped(AccelError):
    """A trial showed that every remaining one would fail the same way (`TrialResults.stopped`): tune ends there."""


def trial_line(result: Trial, done: int, total: int) -> str:
    """One progress line for a finished trial: its throughput, or why it failed."""
    head = f"[{done}/{total}] {result.variant} trial {result.trial}"
    if result.error:
        return f"{head}: FAILED: {result.error_said()}"
    sps, first = result.samples_per_s, result.first_step_s
    line = f"{head}: {sps:.1f} samples/s" if sps is not None else f"{head}: no throughput"
    if first is not None:
        line += f", first step {first:.2f} s"
    skipped = result.skipped_speedups or {}
    if result.measured_in:  # never ended silently: the script's own output stops there
        line += f", measured in `{result.measured_in}`, a process the script started, ended by accel after its steps"
    return line + (f" (skipped here: {', '.join(skipped)})" if skipped else "")


class TrialProgress:
    """A live bar on a terminal; everywhere, one plain line per finished trial."""

    def __init__(self, console: Console, total: int):
        self.console, self.total, self.done = console, total, 0
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self.task = self.progress.add_task("trials", total=total)

    def __enter__(self) -> "TrialProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def started(self, variant: str, trial: int) -> None:
        self.progress.update(self.task, description=f"{variant} trial {trial}")

    def finished(self, result: Trial) -> None:
        self.done += 1
        self._say(trial_line(result, self.done, self.total))

    def skipped(self, variant: str, trial: int, reason: str) -> None:
        self.done += 1
        self._say(f"[{self.done}/{self.total}] {variant} trial {trial}: skipped: {reason}")

    def _say(self, line: str) -> None:
        self.console.print(line, highlight=False, markup=False, soft_wrap=True)
        self.progress.advance(self.task)


def _run_job(
    index: int,
    trial: int,
    variant: str,
    recipe: Path | Launch,
    out: Path,
    settings: TrialSettings,
    cwd: Path | None,
    zygotes: Zygotes,
) -> Trial:
    stem = slug(index, f"{variant}-t{trial}")
    json_path, log_path = out / "trials" / f"{stem}.json", out / "trials" / f"{stem}.log"
    shared = settings.warm_cache
    # a trial's own cache lives in its bench folder (nothing left in the temp folder if the bench is killed)
    cache = (out / "inductor-cache" if shared else out / "trials" / f"{stem}.inductor-cache").resolve()
    if not shared:
        shutil.rmtree(cache, ignore_errors=True)  # cold: nothing from an earlier try at this trial
    if isinstance(recipe, Path):
        # absolute: a revision's trial runs in its checkout, not here
        argv, added = trial_argv(recipe.resolve(), settings, json_path.resolve(), variant, trial), {}
        room, said = None, f"{variant}: the resolved recipe {recipe}"
    else:  # a script: whatever it writes, the user's files stay as they were
        argv, added = recipe.launch(settings, json_path.resolve())
        room, said = Room(argv, cwd, out / "left-behind" / stem), f"{variant}: {recipe.settings()}"
    started, tick = time.time(), time.perf_counter()
    try:
        # the trial records the machine's load over its own timed steps (accel/measure/load.py's Window)
        env = trial_env(cache) | added
        zygote = _zygote(zygotes, argv, env, recipe, settings, variant, cwd)
        forks = zygote.forks if zygote is not None else 0
        result = run_trial_process(argv, json_path, log_path, settings.timeout, env, cwd, room, said, zygote)
        forked = zygote is not None and zygote.forks > forks  # else its zygote had ended: it started fresh
    finally:
        if not shared:
            shutil.rmtree(cache, ignore_errors=True)
    # The runner's own bookkeeping wins over anything the child wrote.
    return result.updated(
        forked_s=zygote.preload_s if forked else None,
        variant=variant,
        trial=trial,
        index=index,
        started_at=started,
        process_s=time.perf_counter() - tick,
        log=str(log_path),
    )


def _zygote(
    zygotes: Zygotes,
    argv: list[str],
    env: dict[str, str],
    recipe: Path | Launch,
    settings: TrialSettings,
    name: str,
    cwd: Path | None,
) -> Zygote | None:
    """The zygote a speed trial forks from (None: it starts fresh). A trial timed to a target, recording a curve or
    training the script's own run (tune's time trials) starts fresh: its time runs from its process's start, imports
    included. So does a trial in a revision's checkout that holds an accel of its own: the zygote runs this one."""
    timed_from_start = settings.target or settings.curve or settings.samples or not settings.steps
    if timed_from_start or (cwd is not None and (cwd / "accel" / "__init__.py").is_file()):
        return None
    preload = RECIPE_PRELOAD if isinstance(recipe, Path) else recipe.preload
    return zygotes.for_trial(argv, env, list(preload), name) if preload else None


def _printer(console: Console) -> Callable[[str], None]:
    return lambda line: console.print(line, highlight=False, markup=False, soft_wrap=True)


@contextmanager
def signals_as_ctrl_c() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP (Ctrl-C, a `kill`, a job scheduler, a closed terminal) stop the trials alike:
    the running trial's process group is killed and the finished trials are reported. Without a handler, SIGTERM
    killed the parent at once and left the trial (in its own session) running with no report, and a bench started
    with SIGINT ignored (a background job of a script) could not be stopped by it at all. An ignored SIGHUP
    (`nohup`) stays ignored."""

    def interrupt(signum, _frame):
        leave_closed_terminal(signum)
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = {
            sig: signal.signal(sig, interrupt) for sig in handled((signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
        }
    except ValueError:  # not the main thread: signals stay with the caller
        previous = {}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class TrialResults(list):
    """The trials' results; `interrupted` when Ctrl-C or SIGTERM stopped them before every job ran; `stopped`: why
    the remaining jobs were refused (a trial showed that every one would fail the same way)."""

    interrupted = False
    stopped: str | None = None


def run_trials(
    jobs: list[tuple[int, str, Path | Launch]],
    out: str | Path,
    settings: TrialSettings,
    console: Console | None = None,
    skip: SkipRule | None = None,
    cwds: dict[str, Path] | None = None,
    earlier: list[Trial] | None = None,
    zygotes: Zygotes | None = None,
) -> TrialResults:
    """Run (trial, variant, recipe file) jobs in the given order, one process each; every result, failed too.

    `skip(variant, results so far)` may return a reason not to run a job (tune: sizes above one that failed).
    `cwds` gives a variant the folder its trials run in (a revision's checkout; default: the current one).
    `earlier`: the bench's trials before these (rounds added to a pilot), which number the jobs after them.
    `zygotes`: the bench's (a script's trials fork from its variant's zygote), else this call's own.
    Ctrl-C or SIGTERM stops after killing the running trial and returns the finished ones, so an hour of work
    still makes a report. A trial whose script never logged its target's metric stops them too (`never_logged`).
    """
    out = Path(out)
    (out / "trials").mkdir(parents=True, exist_ok=True)
    results = TrialResults()
    console = console or Console(stderr=True)
    own = Zygotes(out / "zygotes", _printer(console)) if zygotes is None else nullcontext(zygotes)
    with TrialProgress(console, len(jobs)) as progress, signals_as_ctrl_c(), own as zygotes:
        try:
            before = list(earlier or [])
            for index, (trial, variant, recipe) in enumerate(jobs, start=len(before)):
                reason = skip(variant, results) if skip is not None else None
                if reason is not None:
                    progress.skipped(variant, trial, reason)
                    continue
                progress.started(variant, trial)
                cwd = (cwds or {}).get(variant)
                own = with_deadline(settings, trial, variant, results)
                results.append(_run_job(index, trial, variant, recipe, out, own, cwd, zygotes))
                progress.finished(results[-1])
                left = len(jobs) + len(before) - index - 1
                results.stopped = never_logged(results[-1], [*before, *results[:-1]], left)
                if results.stopped:  # the caller says why, once
                    break
        except KeyboardInterrupt:
            progress.console.print(f"interrupted: keeping the {len(results)} finished trials", highlight=False)
            results.interrupted = True
    return results


def with_deadline(settings: TrialSettings, trial: int, variant: str, done: list[Trial]) -> TrialSettings:
    """tune's pruner: a candidate's deadline is PRUNE_SLACK times the time to the target of the variant
    `settings.deadline_from` (the stage's reference, run first in each round) in the same round, `trial`; none
    when that trial has not reached it."""
    ref = settings.deadline_from
    if ref is None or variant == ref:
        return settings
    reached = next(
        (t.time_to_target_s for t in done if t.variant == ref and t.trial == trial and t.time_to_target_s), None
    )
    return replace(settings, deadline_s=PRUNE_SLACK * reached) if reached else settings


def _environment(results: list[Trial]) -> dict[str, Any]:
    # The environment as a trial saw it (its device, its threads); the parent's only if every trial failed early.
    envs = [r.env for r in results if r.env is not None]
    if envs:
        return envs[0]
    from .. import devices

    return devices.environment()


def run_bench(
    plan: BenchPlan,
    out: str | Path,
    settings: TrialSettings,
    trials: int | Rounds,
    command: str | None = None,
    console: Console | None = None,
) -> tuple[Report, dict[str, Path]]:
    """Run the plan's trials interleaved (A B C A B C ...), then write report.json/.md/.html into `out`.

    The report has `interrupted: true` when Ctrl-C or SIGTERM stopped the trials early: it covers the finished ones,
    says so, and recommends nothing.
    """
    out = Path(out)
    rounds = as_rounds(trials)
    files = write_recipes(plan.recipes, out)
    jobs = [
        (t, v.name, files[v.name]) for t, v in interleave(plan.variants, rounds.pilot) if v.name not in plan.refused
    ]
    configs = {name: recipe.dump() for name, recipe in plan.recipes.items()}
    run = BenchRun(
        plan.variants,
        plan.baseline,
        str(plan.recipe_path),
        configs,
        settings,
        rounds.pilot,
        command,
        plan.refused,
        rounds=rounds,
    )
    return run_and_report(run, jobs, out, console)


def compile_cache(settings: TrialSettings) -> str:
    """What the report says of the trials' compile caches."""
    if not settings.warm_cache:
        return "cold (fresh per trial)"
    return "warm (shared)"


@dataclass
class BenchRun:
    """What a report says ran: the variants, the recipe (or script) and each variant's configuration."""

    variants: list[Variant]
    baseline: str
    source: str  # the recipe file, or the script's command line
    configs: dict[str, dict[str, Any]]  # report.json's `recipes`: each variant's resolved settings
    settings: TrialSettings
    trials: int
    command: str | None = None
    refused: dict[str, str] = field(default_factory=dict)  # variants the conflict rule refused: no trials
    script: list[str] | None = None  # a script's command line (None: a recipe, `source`)
    # a bench of revisions (accel/bench/rev_plan.py): the folder each variant's trials run in (its checkout), the
    # variants that could not start (the error stands for each of their trials), the revisions, and the pairs of
    # variants read against each other
    cwds: dict[str, Path] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    revisions: list[RevisionRecord] | None = None
    pairs: list[tuple[str, str]] = field(default_factory=list)
    rounds: Rounds | None = None  # how many rounds (decide.Rounds); None: `trials`, fixed

    @property
    def planned(self) -> Rounds:
        return self.rounds or fixed_rounds(self.trials)


def as_rounds(trials: int | Rounds) -> Rounds:
    """`--trials N` as a fixed design, or the rounds a bench was given."""
    return trials if isinstance(trials, Rounds) else fixed_rounds(trials)


def run_and_report(
    run: BenchRun, jobs: list[tuple[int, str, Path | Launch]], out: Path, console: Console | None = None
) -> tuple[Report, dict[str, Path]]:
    """Run the jobs (interleaved already) and write the report of the finished trials into `out`."""
    started, tick = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.perf_counter()
    console = console or Console(stderr=True)
    for name, reason in run.refused.items():
        console.print(f"{name}: refused, not run: {reason}", highlight=False, markup=False, soft_wrap=True)
    with Zygotes(out / "zygotes", _printer(console)) as zygotes:  # a variant's zygote serves every look's trials
        results = run_trials(jobs, out, run.settings, console, cwds=run.cwds, zygotes=zygotes)
        rule = run.planned.rule()
        if not run.planned.fixed and not results.interrupted and not results.stopped:
            # the pilot's pace without its one-off zygote starts, which later rounds do not pay
            looks = run.planned.looks(time.perf_counter() - tick - zygotes.started_s)
            rule = run.planned.rule(looks)
            jobs, results = _until_decided(run, jobs, results, out, console, rule, tick, zygotes)
    settings = run.settings
    extra = {
        "recipe": run.source,
        "started": started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "interrupted": (results.interrupted or len(results) < len(jobs)) and not results.stopped,
        **({"stopped": results.stopped} if results.stopped else {}),
        "trials_planned": len(jobs),
        "settings": {
            "steps": settings.steps,
            "warmup": settings.warmup,
            "trials": run.trials,
            "resolution": rule.resolution,
            "rounds": max((t for t, _, _ in jobs), default=-1) + 1,
            **({"max_trials": run.planned.most, "looks": list(rule.looks)} if not run.planned.fixed else {}),
            "timeout_s": settings.timeout,
            "compile_cache": compile_cache(settings),
            "target": settings.target,
            "eval_every": settings.eval_every,
            **({"sync": settings.sync} if settings.sync != "step" else {}),
            **({"window_s": settings.window} if settings.window else {}),
        },
        "recipes": run.configs,
    }
    if run.command:
        extra["command"] = run.command
    files = held(results)  # what kept the user's files from a script's trials
    if files:
        extra["files"] = files
    steps, said = run_steps(run, results)
    if steps:
        extra["settings"] |= {"run_steps": steps, "run_steps_from": said}
    # the report holds the environment once, not in every trial
    records = [r.without("env") for r in results] + _never_started(run)
    env = _environment(results)
    report = summarize(
        records, run.variants, run.baseline, env=env, extra=extra, refused=run.refused, run_steps=steps, rule=rule
    )
    baseline = next(v for v in run.variants if v.name == report.baseline)
    line = None if report.interrupted else run_with(run, report.recommended, baseline)
    if line:  # set only when there is one: a report's keys are those set
        report.recommended.run_with = line
    if run.revisions is not None:
        report.revisions, report.recommended = run.revisions, REVISIONS_COMPARED
        report.revision_readings = read_revisions(report, run.pairs, rule)
    return report, write_reports(report, out)


def say_added_rounds(
    console: Console, rule: Rule, names: list[str], baseline: str, rounds: tuple[int, int], why: str
) -> None:
    """The line a bench or a tune stage prints as it adds `rounds` (first, last) for undecided `names`."""
    undecided = ", ".join(n for n in names if n != baseline)
    console.print(
        f"undecided at +-{rule.resolution:.0%}: {undecided}; rounds {rounds[0]}-{rounds[1]} {why}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


def _until_decided(
    run: BenchRun,
    jobs: list[tuple[int, str, Path | Launch]],
    results: TrialResults,
    out: Path,
    console: Console,
    rule: Rule,
    tick: float,
    zygotes: Zygotes,
) -> tuple[list[tuple[int, str, Path | Launch]], TrialResults]:
    """Rounds added at each planned look for the variants of a comparison still undecided (decide.py), until every
    one decides, the looks end, the budget is spent, or a signal stops the bench. Each added round runs its
    variants interleaved in their first order, so its trials pair with each other as the pilot's do."""
    launch = {variant: recipe for _, variant, recipe in jobs}
    order = list(launch)
    done = run.planned.pilot
    with signals_as_ctrl_c():
        try:
            for look in rule.looks[1:]:
                records = [r.without("env") for r in results]
                report = summarize(records, run.variants, run.baseline, refused=run.refused, rule=rule)
                wanted = undecided_variants(report, run.pairs, rule, run.planned.gate)
                if not wanted or time.perf_counter() - tick >= run.planned.budget_s:
                    break
                names = [v for v in order if v in wanted]
                say_added_rounds(console, rule, names, report.baseline, (done + 1, look), f"for {', '.join(names)}")
                more = [(t, v, launch[v]) for t in range(done, look) for v in names]
                earlier = list(results)
                added = run_trials(more, out, run.settings, console, cwds=run.cwds, earlier=earlier, zygotes=zygotes)
                jobs, done = jobs + more, look
                results.extend(added)
                if added.interrupted or added.stopped:
                    results.interrupted, results.stopped = added.interrupted, added.stopped
                    break
        except KeyboardInterrupt:  # between two looks' trials
            console.print(f"interrupted: keeping the {len(results)} finished trials", highlight=False)
            results.interrupted = True
    return jobs, results


REVISIONS_COMPARED = Recommendation(overrides={}, text="none: this bench compares revisions (see Revisions)")


def _never_started(run: BenchRun) -> list[Trial]:
    """A variant that could not start (a revision without the recipe, a script whose probe failed): its error
    as each of its trials, so the report says it failed, and why, beside the others."""
    return [Trial(variant=name, trial=t, error=error) for name, error in run.failed.items() for t in range(run.trials)]
