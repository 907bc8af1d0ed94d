"""One bench trial in its own process: `python -m accel.bench.trial RECIPE.yaml --steps N --warmup W --json OUT`.

The recipe is already resolved (the runner wrote it); this only adds the bench's own settings: a step budget of
warmup + steps, a device sync after every step so step times are exact, no progress bar, TensorBoard, run
directory, early stopping or mid-run evaluation (evaluation still runs once at the end, so a recipe with a
validation split reports its accuracy; with --target or --curve it also runs every --eval-every steps, each
evaluation's value and wall time recorded, and the time from the process start until the metric reaches the
target; with --no-eval never, which `accel tune` uses for speed: its trials compare only speed and the training
loss, and the evaluation was a fifth of a ResNet-18 trial on a CPU). `accel tune --objective time` adds
--samples (the same data whatever the batch size), --eval-batches and --stop-at-target. It writes a `Trial`
record (accel/bench/records.py) as JSON, which the runner reads back. On any exception the record holds `error`
(the traceback) and the process exits with code 1.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import devices
from ..callbacks.base import BatchInfo, Callback
from ..errors import AccelError
from ..io import write_atomic
from ..measure import load
from ..speedups import compile_figures
from ..speedups.compile_workers import settle_compile_workers
from .records import Trial
from .target import Target, TargetClock, parse_target
from .trial_figures import LAST_LOSS_STEPS, MAX_WINDOW_STEPS, TimedWindow, rates, steady, window_short
from .trial_process import SYNCS, WINDOW_WITH_EVALS

GUARD_BATCHES = 8  # validation batches a trial evaluates for the result guard (no --target)
BENCH_SETTINGS = (
    "train.eval_every_epochs=0",
    "train.early_stopping=null",
    "log.progress=false",
    "log.tensorboard=false",
)


class StepTimer(Callback):
    """Per optimizer step: seconds (data wait + compute over its micro-batches), data wait, samples and loss; and
    the machine's load over the timed steps (`load`: from the end of the `warmup` steps to the window's end). The
    window ends, and the fit with it, once it holds `steps` steps and `window_s` seconds of steady steps
    (trial_figures.TimedWindow).

    With `sync_window` the trainer does not synchronise the device after every step: the timer does so after each
    warm-up step (compilation and warm-up are timed exactly) and after the last step, and times the steps between
    as one window (`window_s`): the host prepares the next batch while the device still works on this one, as in a
    real run, and the window's wall time holds whatever the steps left queued.

    With `guard` (a window by time: variants run different step counts) the result guard's evaluation runs at the
    `warmup + steps`th step, so every variant's metric is read after the same training (`guard_metrics`)."""

    def __init__(
        self, warmup: int, steps: int, window_s: float = 0.0, sync_window: bool = False, guard: bool = False
    ) -> None:
        self.steps: list[dict[str, Any]] = []
        self.fit_started: float | None = None
        self.warmup, self.planned, self.asked_s, self.sync_window = warmup, steps, window_s, sync_window
        self.window_s: float | None = None  # the timed window's wall time, with sync_window
        self.guard, self.guard_metrics = guard, None
        self.load = load.Window()
        self._device, self._window_start, self._full = None, None, False
        self._timed = TimedWindow(steps, window_s)
        self._open = self._new()

    @staticmethod
    def _new() -> dict[str, Any]:
        return {"s": 0.0, "data_s": 0.0, "samples": 0, "tokens": 0, "losses": []}

    def on_fit_start(self, trainer) -> None:
        self.fit_started = time.perf_counter()  # after speed-up setup (jit, compile wrapping)
        self._device = trainer.device
        if not self.warmup:
            self.load.begin()

    def on_batch_end(self, trainer, info: BatchInfo) -> None:
        step = self._open
        step["s"] += info.data_s + info.compute_s
        step["data_s"] += info.data_s
        step["samples"] += info.samples
        step["tokens"] += info.tokens or 0
        step["losses"].append(info.loss)  # a device tensor: reading it here would add a sync
        if not info.optimizer_stepped or self._full:
            return
        self.steps.append(step)
        self._open = self._new()
        done = len(self.steps)
        if done == self.warmup:
            step["s"] += settle_compile_workers()  # a compile-worker pool's start is warm-up, not timed
            self.load.begin()  # before the window's clock starts: its own cost stays out of the timed steps
        self._full = done > self.warmup and self._timed.add(step["s"])
        if self.sync_window:
            self._windowed(step)
        if self.guard and done == self.warmup + self.planned:
            self._evaluate(trainer)
        if self._full:
            self.load.end()
            trainer.should_stop = True

    def _evaluate(self, trainer) -> None:
        """The result guard's evaluation, now; the fit's own at its end is then skipped (no loader left). Its time
        is out of the steps (the trainer's next step starts its clock after this hook) and of the window's clock."""
        from ..train.evaluation import evaluate

        start = time.perf_counter()
        self.guard_metrics = evaluate(trainer)
        trainer.val_loader = None
        if self._window_start is not None:
            self._window_start += time.perf_counter() - start

    def _windowed(self, step: dict[str, Any]) -> None:
        """Synchronise after each warm-up step and the last, the time it took counted in the step; the timed
        window runs from the end of the warm-up to the end of the last step."""
        done, warmup = len(self.steps), self.warmup
        if done > warmup and not self._full:
            return
        start = time.perf_counter()
        devices.synchronize(self._device)
        now = time.perf_counter()
        step["s"] += now - start
        if done == warmup:
            self._window_start = now
        if self._full:
            self.window_s = now - (self._window_start if warmup else self.fit_started)


def _final_loss(steps: list[dict[str, Any]]) -> float | None:
    """The mean loss of the last steps of those given."""
    losses = [loss.float() for s in steps[-LAST_LOSS_STEPS:] for loss in s["losses"]]
    return float(torch.stack(losses).mean()) if losses else None


def _step_losses(steps: list[dict[str, Any]]) -> list[float]:
    """Each optimizer step's mean training loss (one device sync for the run, at its end)."""
    if not steps:
        return []
    losses = torch.stack([torch.stack([loss.float() for loss in s["losses"]]).mean() for s in steps])
    return losses.tolist()


def measure(timer: StepTimer, warmup: int, setup_s: float) -> dict[str, Any]:
    """Throughput and timing figures from the timed steps (those after `warmup`, less the leading one-offs that
    trial_figures.steady moves into the warm-up); warm-up reported apart.

    `setup_s` is the time fit() spent before the first step (speed-up setup). It counts towards first_step_s
    and warmup_s because it is start-up cost a speed-up must repay, like compilation in the first step.
    """
    if len(timer.steps) <= warmup:
        raise AccelError(f"no timed steps: only {len(timer.steps)} optimizer steps ran, all of them warm-up.")
    cut, timed, said = steady(timer.steps[warmup:])
    cut_s = sum(s["s"] for s in cut)
    window_s = timer.window_s - cut_s if timer.window_s else None  # the window's wall time (--sync window)
    return {
        **rates(timed, total_s=window_s),
        **said,
        **window_short([s["s"] for s in timer.steps[warmup:]], timer.asked_s),
        "setup_s": setup_s,
        "first_step_s": setup_s + timer.steps[0]["s"],
        "warmup_s": setup_s + sum(s["s"] for s in timer.steps[:warmup]) + cut_s,
        # after the planned steps, as every variant trained them: a window by time runs each to its own count
        "final_loss": _final_loss(timer.steps[warmup : warmup + timer.planned]),
    }


@dataclass(frozen=True)
class Evals:
    """When a trial evaluates: `every` N steps (None: a tenth of the run) when timing a `target` or recording the
    `curve` of the main metric, each pass over at most `batches` validation batches (None: all); `stop`: end the
    trial at the target. `enabled`: False evaluates nothing."""

    target: Target | None = None
    every: int | None = None
    batches: int | None = None
    stop: bool = False
    curve: bool = False
    enabled: bool = True
    deadline: float | None = None  # tune's pruner: stop short of the target past it (accel.bench.pruner)

    @property
    def timed(self) -> bool:
        return self.target is not None or self.curve


def _total_steps(recipe_path: Path, steps: int, warmup: int, samples: int | None, window: float) -> int:
    """warmup + steps (with a `window` by time, the most it may take: the timer ends the fit sooner), or with
    `samples` the optimizer steps that train on that many samples at this recipe's batch size (at least warmup + 1)."""
    if samples is None:
        return warmup + (max(steps, MAX_WINDOW_STEPS) if window else steps)
    from ..config.recipe import load_recipe

    recipe = load_recipe(recipe_path)
    per_step = recipe.data.batch_size * recipe.train.grad_accum
    return max(-(-samples // per_step), warmup + 1)


def _eval_settings(evals: Evals, total: int) -> list[str]:
    """`total`: the planned steps (a window by time may run more)."""
    # Time to a target needs the validation metric of the run, not of a few batches, unless tune caps it (every
    # candidate then evaluates on the same first batches); the result guard compares every variant on the same
    # first batches, and evaluating a large validation set does not dominate the trial.
    if not evals.timed:
        return [f"train.eval_max_batches={GUARD_BATCHES}"]
    settings = [f"train.eval_every_steps={evals.every or max(total // 10, 1)}"]
    return settings + ([f"train.eval_max_batches={evals.batches}"] if evals.batches else [])


def run_trial(
    recipe_path: Path,
    steps: int,
    warmup: int,
    trial: int = 0,
    evals: Evals = Evals(),
    samples: int | None = None,
    sync: str = "step",
    window: float = 0.0,
) -> Trial:
    """Build and fit the recipe under the bench settings; the measured figures of one trial.

    Trial k trains with the recipe's seed + k, in every variant. Runs are otherwise deterministic, so without
    this every trial of a variant would end on the same loss, and any rounding difference between variants
    (bf16, a fused kernel) would look like a changed result; with it, the trials' spread shows how far results
    move by chance, and a variant's result is flagged only when it moves further.
    """
    from ..config.recipe import load_recipe
    from ..models.blocks import model_traits
    from ..train.run import build_trainer

    started = time.perf_counter()
    if window and samples is not None:
        raise AccelError("--window times a trial's steps; a trial of --samples trains on those samples alone.")
    total = _total_steps(recipe_path, steps, warmup, samples, window)
    if sync == "window" and evals.timed:
        raise AccelError(WINDOW_WITH_EVALS)
    step_sync = [f"train.sync_every_step={str(sync == 'step').lower()}"]
    planned = total if samples is not None else warmup + steps
    settings = [f"train.max_steps={total}", *step_sync, *BENCH_SETTINGS, *_eval_settings(evals, planned)]
    recipe = load_recipe(recipe_path, settings)
    recipe.seed += trial
    guard = bool(window) and evals.enabled and not evals.timed
    timer = StepTimer(warmup, planned - warmup, window, sync_window=sync == "window", guard=guard)
    clock = TargetClock(evals.target, evals.stop, evals.deadline, warmup) if evals.timed else None
    trainer = build_trainer(recipe, run_dir=None, extra_callbacks=[timer] + ([clock] if clock else []))
    if not evals.enabled:
        trainer.val_loader = None
    built = time.perf_counter()
    devices.reset_peak_memory(trainer.device)
    trainer.fit()
    summary, stopped = trainer.summary, clock is not None and clock.stopped  # at the target, or pruned
    if summary.status != "completed" and not stopped:
        raise AccelError(f"training did not complete (status {summary.status}).")
    if len(timer.steps) < planned and not stopped:
        raise AccelError(f"only {len(timer.steps)} of {planned} steps ran.")
    result = measure(timer, warmup, setup_s=(timer.fit_started or built) - built)
    metrics = summary.metrics if timer.guard_metrics is None else timer.guard_metrics
    return Trial(
        **result,
        **{
            "peak_memory_mb": devices.peak_memory_mb(trainer.device),
            "flops_per_step": summary.flops_per_step,
            "flop_per_s": None,
            "mfu": None,
            **trainer.utilisation.stats(result["samples_per_s"]),  # over the timed steps, as samples_per_s
            "mfu_of": trainer.utilisation.peak_dtype,
            "val_accuracy": metrics.get("val_accuracy"),
            # the task's main metric guards the results: accuracy for classification, val_loss for most others
            "val_metric_name": trainer.task.main_metric[0],
            "val_metric": metrics.get(trainer.task.main_metric[0]),
            "batch_size": recipe.data.batch_size,
            "grad_accum": recipe.train.grad_accum,
            "build_s": built - started,
            "wall_s": time.perf_counter() - started,
            "skipped_speedups": summary.skipped_speedups,
            "lint": summary.lint,
            **compile_figures(summary.speedup_metrics),
            "model_traits": model_traits(trainer.module),
            "steps_per_epoch": _steps_per_epoch(trainer),
            "env": devices.environment(trainer.device),
            **(clock.result() if clock else {}),
            "step_losses": [float(loss) for loss in _step_losses(timer.steps)],
            "load": timer.load.end(),  # a trial stopped at its target: up to its last step
        },
    )


def _steps_per_epoch(trainer) -> int | None:
    from ..train.trainer import steps_per_epoch

    try:
        return steps_per_epoch(len(trainer.train_loader), trainer.cfg.grad_accum)
    except TypeError:  # a loader without a length
        return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m accel.bench.trial", description=__doc__.splitlines()[0])
    parser.add_argument("recipe", type=Path, help="a resolved recipe YAML file")
    parser.add_argument("--steps", type=int, required=True, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, required=True, help="untimed optimizer steps before them")
    parser.add_argument("--json", type=Path, required=True, help="where to write the trial dict")
    parser.add_argument("--variant", default=None, help="variant name recorded in the result")
    parser.add_argument("--trial", type=int, default=0, help="trial number recorded in the result")
    parser.add_argument(
        "--target",
        type=parse_target,
        default=None,
        metavar="METRIC=VALUE",
        help="evaluate every --eval-every steps; record when METRIC first reaches VALUE",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help="with --target or --curve: steps between evaluations (default: a tenth of the run)",
    )
    parser.add_argument("--curve", action="store_true", help="evaluate every --eval-every steps; record each value")
    parser.add_argument("--eval-batches", type=int, default=None, help="validation batches per evaluation (all)")
    parser.add_argument("--stop-at-target", action="store_true", help="end the trial once --target is reached")
    parser.add_argument(
        "--deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --stop-at-target: end the trial short of the target once it cannot reach it by then",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=None,
        help="train on this many samples (steps from the batch size), not warmup + --steps",
    )
    parser.add_argument("--no-eval", dest="evaluate", action="store_false", help="evaluate nothing (not with --target)")
    parser.add_argument(
        "--sync",
        choices=SYNCS,
        default="step",
        help="synchronise the device after every step, or only around the timed window",
    )
    parser.add_argument(
        "--window", type=float, default=0.0, help="time steps until they hold this many seconds too (0: --steps alone)"
    )
    return parser


def _evals(args: argparse.Namespace) -> Evals:
    if (args.target or args.curve) and not args.evaluate:
        raise AccelError("--target and --curve need evaluations; drop --no-eval.")
    if args.stop_at_target and not args.target:
        raise AccelError("--stop-at-target needs a --target.")
    if args.deadline is not None and not args.stop_at_target:
        raise AccelError("--deadline needs --stop-at-target.")
    return Evals(
        args.target, args.eval_every, args.eval_batches, args.stop_at_target, args.curve, args.evaluate, args.deadline
    )


def main(argv: list[str] | None = None) -> int:
    """Run one trial and write its record; exit code 1 (with `error` in the record) when it raised."""
    args = _parser().parse_args(argv)
    head = {"variant": args.variant or args.recipe.stem, "trial": args.trial, "error": None}
    try:
        if args.steps < 1 or args.warmup < 0:
            raise AccelError(f"--steps must be >= 1 and --warmup >= 0, got {args.steps} and {args.warmup}.")
        evals = _evals(args)
        measured = run_trial(
            args.recipe, args.steps, args.warmup, args.trial, evals, args.samples, args.sync, args.window
        )
        result, code = measured.updated(**head), 0
    except BaseException:  # KeyboardInterrupt too: the runner still gets a readable record
        result, code = Trial(**head | {"error": traceback.format_exc()}), 1
        traceback.print_exc()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.json, result.to_json())  # NaN as "NaN": a diverged loss must read as diverged
    return code


if __name__ == "__main__":
    sys.exit(main())
