"""One bench trial in its own process: `python -m accel.bench.trial RECIPE.yaml --steps N --warmup W --json OUT`.

The recipe is already resolved (the runner wrote it); this only adds the bench's own settings: a step budget of
warmup + steps, a device sync after every step so step times are exact, no progress bar, TensorBoard, run
directory, early stopping or mid-run evaluation (evaluation still runs once at the end, so a recipe with a
validation split reports its accuracy; with --target it also runs every --eval-every steps, timed from the
process start until the metric reaches the target; with --no-eval never, which `accel tune` uses: its trials
compare only speed and the training loss, and the evaluation was a fifth of a ResNet-18 trial on a CPU). It
writes a `Trial` record (accel/bench/records.py) as JSON, which the runner reads back. On any exception the
record holds `error` (the traceback) and the process exits with code 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from .. import devices
from ..callbacks.base import BatchInfo, Callback
from ..errors import AccelError
from ..io import write_atomic
from .records import Trial
from .target import Target, TargetClock, parse_target

LAST_LOSS_STEPS = 5  # final_loss averages this many last timed steps: one step's loss is too noisy to compare

GUARD_BATCHES = 8  # validation batches a trial evaluates for the result guard (no --target)
BENCH_SETTINGS = (
    "train.sync_every_step=true",
    "train.eval_every_epochs=0",
    "train.early_stopping=null",
    "log.progress=false",
    "log.tensorboard=false",
)


class StepTimer(Callback):
    """Per optimizer step: seconds (data wait + compute over its micro-batches), data wait, samples and loss."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.fit_started: float | None = None
        self._open = self._new()

    @staticmethod
    def _new() -> dict[str, Any]:
        return {"s": 0.0, "data_s": 0.0, "samples": 0, "tokens": 0, "losses": []}

    def on_fit_start(self, trainer) -> None:
        self.fit_started = time.perf_counter()  # after speed-up setup (jit, compile wrapping)

    def on_batch_end(self, trainer, info: BatchInfo) -> None:
        step = self._open
        step["s"] += info.data_s + info.compute_s
        step["data_s"] += info.data_s
        step["samples"] += info.samples
        step["tokens"] += info.tokens or 0
        step["losses"].append(info.loss)  # a device tensor: reading it here would add a sync
        if info.optimizer_stepped:
            self.steps.append(step)
            self._open = self._new()


def _final_loss(steps: list[dict[str, Any]]) -> float | None:
    losses = [loss.float() for s in steps[-LAST_LOSS_STEPS:] for loss in s["losses"]]
    return float(torch.stack(losses).mean()) if losses else None


def _median_rate(steps: list[dict[str, Any]]) -> float | None:
    rates = [s["samples"] / s["s"] for s in steps if s["s"] > 0]
    return statistics.median(rates) if rates else None


def measure(timer: StepTimer, warmup: int, setup_s: float) -> dict[str, Any]:
    """Throughput and timing figures from the timed steps (those after `warmup`); warm-up reported apart.

    `setup_s` is the time fit() spent before the first step (speed-up setup). It counts towards first_step_s
    and warmup_s because it is start-up cost a speed-up must repay, like compilation in the first step.
    """
    timed = timer.steps[warmup:]
    if not timed:
        raise AccelError(f"no timed steps: only {len(timer.steps)} optimizer steps ran, all of them warm-up.")
    total_s = sum(s["s"] for s in timed)
    tokens = sum(s["tokens"] for s in timed)
    return {
        "samples_per_s": sum(s["samples"] for s in timed) / total_s if total_s > 0 else None,
        # robust to a shared machine's stalls: one stalled step moves the mean above 10-20%, not the median
        "median_step_samples_per_s": _median_rate(timed),
        "tokens_per_s": tokens / total_s if tokens and total_s > 0 else None,
        "step_times_s": [s["s"] for s in timed],
        "data_wait_fraction": sum(s["data_s"] for s in timed) / total_s if total_s > 0 else None,
        "setup_s": setup_s,
        "first_step_s": setup_s + timer.steps[0]["s"],
        "warmup_s": setup_s + sum(s["s"] for s in timer.steps[:warmup]),
        "final_loss": _final_loss(timed),
        "steps": len(timed),
    }


def run_trial(
    recipe_path: Path,
    steps: int,
    warmup: int,
    trial: int = 0,
    target: Target | None = None,
    eval_every: int | None = None,
    evaluate: bool = True,
) -> Trial:
    """Build and fit the recipe under the bench settings; the measured figures of one trial.

    Trial k trains with the recipe's seed + k, in every variant. Runs are otherwise deterministic, so without
    this every trial of a variant would end on the same loss, and any rounding difference between variants
    (bf16, a fused kernel) would look like a changed result; with it, the trials' spread shows how far results
    move by chance, and a variant's result is flagged only when it moves further.
    """
    from ..models.blocks import model_traits
    from ..recipe import load_recipe
    from ..run import build_trainer

    started = time.perf_counter()
    # Time to a target needs the whole validation set; otherwise the result guard compares every variant on
    # the same first batches, and evaluating a large validation set does not dominate the trial.
    evals = (
        [f"train.eval_every_steps={eval_every or max((warmup + steps) // 10, 1)}"]
        if target
        else [f"train.eval_max_batches={GUARD_BATCHES}"]
    )
    recipe = load_recipe(recipe_path, [f"train.max_steps={warmup + steps}", *BENCH_SETTINGS, *evals])
    recipe.seed += trial
    timer, clock = StepTimer(), TargetClock(target) if target else None
    trainer = build_trainer(recipe, run_dir=None, extra_callbacks=[timer] + ([clock] if clock else []))
    if not evaluate:
        trainer.val_loader = None
    built = time.perf_counter()
    devices.reset_peak_memory(trainer.device)
    summary = trainer.fit()
    if summary["status"] != "completed":
        raise AccelError(f"training did not complete (status {summary['status']}).")
    if len(timer.steps) < warmup + steps:
        raise AccelError(f"only {len(timer.steps)} of {warmup + steps} steps ran.")
    result = measure(timer, warmup, setup_s=(timer.fit_started or built) - built)
    return Trial(
        **result,
        **{
            "peak_memory_mb": devices.peak_memory_mb(trainer.device),
            "flops_per_step": summary.get("flops_per_step"),
            "flop_per_s": None,
            "mfu": None,
            **trainer.utilisation.stats(result["samples_per_s"]),  # over the timed steps, as samples_per_s
            "val_accuracy": summary["metrics"].get("val_accuracy"),
            # the task's main metric guards the results: accuracy for classification, val_loss for most others
            "val_metric_name": trainer.task.main_metric[0],
            "val_metric": summary["metrics"].get(trainer.task.main_metric[0]),
            "batch_size": recipe.data.batch_size,
            "grad_accum": recipe.train.grad_accum,
            "build_s": built - started,
            "wall_s": time.perf_counter() - started,
            "skipped_speedups": summary.get("skipped_speedups") or {},
            "lint": summary.get("lint") or [],
            **_compile_figures(summary),
            "model_traits": model_traits(trainer.module),
            "steps_per_epoch": _steps_per_epoch(trainer),
            "env": devices.environment(trainer.device),
            **(clock.result() if clock else {}),
        },
    )


def _compile_figures(summary: dict) -> dict[str, Any]:
    """What torch.compile cost this trial (dynamo's own compile seconds, apart from the first step's run time)."""
    compiled = (summary.get("speedup_metrics") or {}).get("compile")
    if not compiled:
        return {}
    return {
        "compile_s": compiled.get("seconds"),
        "graph_breaks": compiled.get("graph_breaks"),
        "recompiles": compiled.get("recompiles"),
    }


def _steps_per_epoch(trainer) -> int | None:
    from ..trainer import steps_per_epoch

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
    parser.add_argument("--eval-every", type=int, default=None, help="steps between evaluations (with --target)")
    parser.add_argument("--no-eval", dest="evaluate", action="store_false", help="evaluate nothing (not with --target)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one trial and write its record; exit code 1 (with `error` in the record) when it raised."""
    args = _parser().parse_args(argv)
    head = {"variant": args.variant or args.recipe.stem, "trial": args.trial, "error": None}
    try:
        if args.steps < 1 or args.warmup < 0:
            raise AccelError(f"--steps must be >= 1 and --warmup >= 0, got {args.steps} and {args.warmup}.")
        if args.target and not args.evaluate:
            raise AccelError("--target needs evaluations; drop --no-eval.")
        measured = run_trial(
            args.recipe, args.steps, args.warmup, args.trial, args.target, args.eval_every, args.evaluate
        )
        result, code = measured.updated(**head), 0
    except BaseException:  # KeyboardInterrupt too: the runner still gets a readable record
        result, code = Trial(**head | {"error": traceback.format_exc()}), 1
        traceback.print_exc()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.json, result.to_json())  # NaN stays NaN: a diverged loss must read as diverged
    return code


if __name__ == "__main__":
    sys.exit(main())
