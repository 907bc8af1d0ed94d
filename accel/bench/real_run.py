"""The user's real run, which a bench's recommendation is for: its length in optimizer steps (a speed-up must repay
its start-up within it) and the command that runs the recommendation."""

from __future__ import annotations

import json
import shlex
import statistics
from typing import TYPE_CHECKING, Any

from .records import Recommendation, Trial
from .variants import Variant, format_value

if TYPE_CHECKING:
    from .runner import BenchRun


def run_steps(run: BenchRun, trials: list[Trial]) -> tuple[int | None, str | None]:
    """The real run's optimizer steps and where they came from: `--run-steps`, else what the run declares (a
    recipe's budget; an unchanged script's Trainer: HF's max_steps, Lightning's estimated stepping batches)."""
    if run.settings.run_steps:
        return run.settings.run_steps, "--run-steps"
    train = (run.configs.get(run.baseline) or {}).get("train")
    if run.script is None and train:
        if train.get("max_steps"):
            return train["max_steps"], "the recipe's train.max_steps"
        # the baseline's: a break-even counts the baseline's steps (another batch size has other epochs)
        per_epoch = [t.steps_per_epoch for t in trials if t.steps_per_epoch and t.variant == run.baseline]
        if per_epoch and train.get("epochs"):
            return int(statistics.median(per_epoch)) * train["epochs"], "the recipe's epochs"
    declared = [t.run_steps for t in trials if t.run_steps and t.variant == run.baseline]
    if declared:
        return int(statistics.median(declared)), "its max_steps or epochs, as the script's Trainer has them"
    return None, None


def run_with(run: BenchRun, recommended: Recommendation, baseline: Variant) -> str | None:
    """The command that runs the recommended configuration; None where that is the baseline as it runs."""
    changed = {k: v for k, v in recommended.overrides.items() if baseline.overrides.get(k) != v}
    if not changed:
        return None
    if run.script is None:
        return shlex.join(["accel", "train", run.source, *(f"--set={k}={_text(v)}" for k, v in changed.items())])
    from .script import launch_of

    return launch_of(run.script, [], Variant("recommended", dict(recommended.overrides))).shell_line()


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (dict, list)) else format_value(value)
