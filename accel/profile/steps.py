"""`accel profile RECIPE`: the recipe's trainer as `accel train` builds it (speed-ups included), with a
ProfileWindow over `warmup` unprofiled then `steps` profiled optimizer steps, and nothing else written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config.recipe import Recipe
from ..errors import AccelError
from ..runs import signals
from . import report
from .window import ProfileWindow


def step_overrides(warmup: int, steps: int) -> list[str]:
    """What profiling changes in the recipe: exactly warmup + steps optimizer steps, nothing written."""
    check_window(warmup, steps)
    return [
        f"train.max_steps={warmup + steps}",
        "train.eval_every_epochs=0",
        "log.progress=false",
        "log.tensorboard=false",
    ]


def check_window(warmup: int, steps: int) -> None:
    if steps < 1 or warmup < 0:
        raise AccelError(f"need --steps >= 1 and --warmup >= 0; got {steps} and {warmup}.")


def check_sync_debug(recipe: Recipe, sync_debug: bool) -> None:
    if sync_debug and not recipe.device.startswith("cuda"):
        raise AccelError("--sync-debug needs CUDA: it reports host-device syncs, and this recipe runs on the CPU.")


def profile_window(
    warmup: int,
    steps: int,
    folder: Path,
    command: str,
    recipe: str | list[str],
    rows: int = 15,
    sync_debug: bool = False,
    overrides: list[str] = (),
) -> ProfileWindow:
    """A ProfileWindow that writes its report (profile.json, .md, .html, the trace) into `folder` when the run
    ends; the report dict is then its `.report`. `recipe` (a path, or a script's command line) and its
    `overrides` (--set) go into the advice's bench commands."""

    def finished(profiled) -> dict[str, Any]:
        built = report.build(profiled, folder, command, recipe, rows, overrides)
        report.write(built, folder)
        return built

    return ProfileWindow(warmup, steps, folder, finished, sync_debug)


def profile_recipe(recipe: Recipe, profiler: ProfileWindow) -> dict[str, Any] | None:
    """Run the recipe (given `step_overrides`) with `profiler` in its trainer; returns the report, or None when a
    signal stopped the run before its profiled steps."""
    from ..train.run import build_trainer

    check_sync_debug(recipe, profiler.sync_debug)
    try:
        with signals.abort_on_signals():  # start-up writes nothing: a signal ends it at once
            trainer = build_trainer(recipe, extra_callbacks=[profiler])
    except signals.StartupInterrupted:
        return None
    trainer.val_loader = None  # the final evaluation is not part of a step
    trainer.fit()
    if profiler.report is None and trainer.summary.status not in ("interrupted", "preempted"):
        raise AccelError(f"`{recipe.name}` ended before its profiled steps: nothing to report.")
    return profiler.report
