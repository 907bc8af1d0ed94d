"""Run an A/B bench: resolve variants into recipe files, run interleaved trials in fresh processes, report.

Each trial is `python -m accel.bench.trial` in its own process (and process group, so a timeout kills its
DataLoader workers too), so no global state, allocator pool or warm cache leaks from one trial into the next;
it dies with the bench (`signals.die_with_parent`), even one killed by SIGKILL.
Compilation caches are cold by default (a fresh TORCHINDUCTOR_CACHE_DIR per trial, under OUT/trials, removed
after it, so a killed bench leaves nothing outside OUT): the compile time a user pays on a new machine is part
of the honest price of `torch.compile`. `warm_cache` shares one cache under OUT.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ..config.recipe import Recipe, load_recipe, validate_recipe
from ..config.recipe_yaml import Origins, apply_overrides
from ..errors import AccelError, RecipeError
from ..measure import load
from ..runs.signals import die_with_parent, handled, leave_closed_terminal
from .records import Report, Trial
from .report import write_reports
from .summary import summarize
from .variants import Variant, ablation_variants, interleave, vary_variants

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding `accel/`, for the children's imports
TAIL_LINES = 30
SkipRule = Callable[[str, list], "str | None"]


@dataclass
class BenchPlan:
    """What a bench will run: the variants, which one is the baseline, and each one's resolved recipe."""

    recipe_path: Path
    name: str
    variants: list[Variant]
    baseline: str
    recipes: dict[str, Recipe]


def resolve_variant(base: Recipe, variant: Variant) -> Recipe:
    """`base` (already resolved, --set applied) with the variant's overrides, validated like `--set`."""
    # JSON text is YAML, so typed values survive apply_overrides' parsing ("64" stays a string, 64 an int).
    items = [f"{key}={json.dumps(value)}" for key, value in variant.overrides.items()]
    origins = Origins()
    try:
        return validate_recipe(apply_overrides(base.dump(), origins, items), origins)
    except RecipeError as err:
        raise RecipeError(f"variant `{variant.name}`: {err}") from None


def plan_bench(
    recipe_path: str | Path, sets: list[str], ablate: bool, vary: list[str], only: list[str] | None = None
) -> BenchPlan:
    """Load the recipe with `sets`, build the variants (--ablate or --vary, narrowed to `only`) and resolve
    every one up front, so a bad value fails in a second rather than after an hour of trials."""
    if ablate == bool(vary):
        raise AccelError(
            "accel bench needs exactly one of --ablate (every speed-up on/off) or --vary KEY=V1,V2 "
            "(repeatable), e.g. --vary data.batch_size=64,128."
        )
    base = load_recipe(recipe_path, sets)
    variants = ablation_variants(base.dump()["speedups"]) if ablate else vary_variants(vary)
    if only:
        variants = _only(variants, only)
    recipes = {v.name: resolve_variant(base, v) for v in variants}
    return BenchPlan(Path(recipe_path), base.name, variants, variants[0].name, recipes)


def _only(variants: list[Variant], names: list[str]) -> list[Variant]:
    """The named variants, the first variant (the report's baseline) always kept."""
    known = {v.name for v in variants}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise AccelError(f"--only: no variant named {', '.join(unknown)}; variants: {', '.join(sorted(known))}.")
    return [v for i, v in enumerate(variants) if i == 0 or v.name in names]


def _slug(index: int, name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "._=-" else "_" for c in name)
    return f"{index:02d}-{safe[:80]}"


def write_recipes(recipes: dict[str, Recipe], out: Path) -> dict[str, Path]:
    """Each variant's resolved recipe as OUT/recipes/NN-NAME.yaml: the exact input of its trials."""
    folder = Path(out) / "recipes"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for i, (name, recipe) in enumerate(recipes.items()):
        paths[name] = folder / f"{_slug(i, name)}.yaml"
        paths[name].write_text(f"# accel bench variant `{name}`, fully resolved\n{recipe.dump_yaml()}")
    return paths


def trial_env(cache_dir: Path) -> dict[str, str]:
    """The parent's environment, with the compile caches pointed at `cache_dir` and accel importable."""
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    env["TRITON_CACHE_DIR"] = str(cache_dir / "triton")  # else Triton keeps kernels warm in ~/.triton
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"  # the log tail must hold the last words of a process that died
    return env


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the trial and its DataLoader workers, nothing else
    except ProcessLookupError:
        pass
    proc.wait()


def _exit_reason(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name
        hint = " (often the out-of-memory killer)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with code {code}"


def _read_result(path: Path) -> Trial | None:
    try:
        return Trial.model_validate_json(path.read_text())
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return None


def run_trial_process(
    argv: list[str], json_path: Path, log_path: Path, timeout: float | None, env: dict[str, str]
) -> Trial:
    """Run one trial command; its record, or one holding only `error` with the output tail when it crashed,
    timed out or wrote no readable record. Output goes to `log_path`."""
    json_path.unlink(missing_ok=True)
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=die_with_parent
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return Trial(error=f"timed out after {timeout:g} s (--timeout); last output:\n{_tail(log_path)}")
        except BaseException:  # Ctrl-C reaches only us (new session): take the trial down with us
            _kill_group(proc)
            raise
    result = _read_result(json_path)
    if result is None:
        return Trial(
            error=f"trial process {_exit_reason(code)} without a readable result; last output:\n{_tail(log_path)}"
        )
    if code != 0 and result.error is None:
        result = result.updated(
            error=f"trial process {_exit_reason(code)} after writing its result; last output:\n{_tail(log_path)}"
        )
    return result


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


@dataclass
class TrialSettings:
    """How every trial runs: timed steps, warm-up steps, the per-trial time limit and the compile cache."""

    steps: int
    warmup: int
    timeout: float | None = None
    warm_cache: bool = False
    target: str | None = None  # METRIC=VALUE: time each trial until the metric reaches VALUE
    eval_every: int | None = None
    evaluate: bool = True  # False: no evaluation at all (tune guards results by the training loss alone)
    # tune --objective time: every trial trains on `samples` samples whatever its batch size, evaluates on
    # `eval_batches` batches, records its curve (`curve`: also with no target yet) and stops at the target
    samples: int | None = None
    eval_batches: int | None = None
    curve: bool = False
    stop_at_target: bool = False


def trial_argv(recipe: Path, settings: TrialSettings, json_path: Path, variant: str, trial: int) -> list[str]:
    """The command line of one trial process."""
    return [
        sys.executable,
        "-m",
        "accel.bench.trial",
        str(recipe),
        "--steps",
        str(settings.steps),
        "--warmup",
        str(settings.warmup),
        "--json",
        str(json_path),
        f"--variant={variant}",
        "--trial",
        str(trial),  # `=`: a name like -amp is not an option
        *(["--target", settings.target] if settings.target else []),
        *(["--eval-every", str(settings.eval_every)] if settings.eval_every else []),
        *(["--curve"] if settings.curve else []),
        *(["--eval-batches", str(settings.eval_batches)] if settings.eval_batches else []),
        *(["--samples", str(settings.samples)] if settings.samples else []),
        *(["--stop-at-target"] if settings.stop_at_target else []),
        *([] if settings.evaluate else ["--no-eval"]),
    ]


class Launch(Protocol):
    """How a variant's trial starts when it is not a recipe file: a user's script (accel.bench.script)."""

    def launch(self, settings: TrialSettings, json_path: Path) -> tuple[list[str], dict[str, str]]:
        """The command line and the environment variables it adds."""


def _run_job(index: int, trial: int, variant: str, recipe: Path | Launch, out: Path, settings: TrialSettings) -> Trial:
    stem = _slug(index, f"{variant}-t{trial}")
    json_path, log_path = out / "trials" / f"{stem}.json", out / "trials" / f"{stem}.log"
    shared = settings.warm_cache
    # a trial's own cache lives in its bench folder (nothing left in the temp folder if the bench is killed)
    cache = (out / "inductor-cache" if shared else out / "trials" / f"{stem}.inductor-cache").resolve()
    if not shared:
        shutil.rmtree(cache, ignore_errors=True)  # cold: nothing from an earlier try at this trial
    if isinstance(recipe, Path):
        argv, added = trial_argv(recipe, settings, json_path, variant, trial), {}
    else:
        argv, added = recipe.launch(settings, json_path.resolve())
    started, tick = time.time(), time.perf_counter()
    try:
        with load.watched() as machine:  # other processes' share of the cores while the trial ran
            result = run_trial_process(argv, json_path, log_path, settings.timeout, trial_env(cache) | added)
    finally:
        if not shared:
            shutil.rmtree(cache, ignore_errors=True)
    # The runner's own bookkeeping wins over anything the child wrote.
    return result.updated(
        load=machine,
        variant=variant,
        trial=trial,
        index=index,
        started_at=started,
        process_s=time.perf_counter() - tick,
        log=str(log_path),
    )


@contextmanager
def _signals_as_ctrl_c() -> Iterator[None]:
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
    """The trials' results; `interrupted` when Ctrl-C or SIGTERM stopped them before every job ran."""

    interrupted = False


def run_trials(
    jobs: list[tuple[int, str, Path | Launch]],
    out: str | Path,
    settings: TrialSettings,
    console: Console | None = None,
    skip: SkipRule | None = None,
) -> TrialResults:
    """Run (trial, variant, recipe file) jobs in the given order, one process each; every result, failed too.

    `skip(variant, results so far)` may return a reason not to run a job (tune: sizes above one that failed).
    Ctrl-C or SIGTERM stops after killing the running trial and returns the finished ones, so an hour of work
    still makes a report.
    """
    out = Path(out)
    (out / "trials").mkdir(parents=True, exist_ok=True)
    results = TrialResults()
    with TrialProgress(console or Console(stderr=True), len(jobs)) as progress, _signals_as_ctrl_c():
        try:
            for index, (trial, variant, recipe) in enumerate(jobs):
                reason = skip(variant, results) if skip is not None else None
                if reason is not None:
                    progress.skipped(variant, trial, reason)
                    continue
                progress.started(variant, trial)
                results.append(_run_job(index, trial, variant, recipe, out, settings))
                progress.finished(results[-1])
        except KeyboardInterrupt:
            progress.console.print(f"interrupted: keeping the {len(results)} finished trials", highlight=False)
            results.interrupted = True
    return results


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
    trials: int,
    command: str | None = None,
    console: Console | None = None,
) -> tuple[Report, dict[str, Path]]:
    """Run the plan's trials interleaved (A B C A B C ...), then write report.json/.md/.html into `out`.

    The report has `interrupted: true` when Ctrl-C or SIGTERM stopped the trials early: it covers the finished ones,
    says so, and recommends nothing.
    """
    out = Path(out)
    files = write_recipes(plan.recipes, out)
    jobs = [(t, v.name, files[v.name]) for t, v in interleave(plan.variants, trials)]
    configs = {name: recipe.dump() for name, recipe in plan.recipes.items()}
    run = BenchRun(plan.variants, plan.baseline, str(plan.recipe_path), configs, settings, trials, command)
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


def run_and_report(
    run: BenchRun, jobs: list[tuple[int, str, Path | Launch]], out: Path, console: Console | None = None
) -> tuple[Report, dict[str, Path]]:
    """Run the jobs (interleaved already) and write the report of the finished trials into `out`."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    results = run_trials(jobs, out, run.settings, console)
    settings = run.settings
    extra = {
        "recipe": run.source,
        "started": started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "interrupted": len(results) < len(jobs),
        "trials_planned": len(jobs),
        "settings": {
            "steps": settings.steps,
            "warmup": settings.warmup,
            "trials": run.trials,
            "timeout_s": settings.timeout,
            "compile_cache": compile_cache(settings),
            "target": settings.target,
            "eval_every": settings.eval_every,
        },
        "recipes": run.configs,
    }
    if run.command:
        extra["command"] = run.command
    # the report holds the environment once, not in every trial
    records = [r.without("env") for r in results]
    report = summarize(records, run.variants, run.baseline, env=_environment(results), extra=extra)
    return report, write_reports(report, out)
