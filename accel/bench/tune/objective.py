"""What tune optimises: samples per second (`speed`), or the wall time until a validation target (`time`).

Under `time` every trial trains on the same samples (the trial's planned run at the recipe's batch size; a
batch-size candidate takes as many steps as that needs), evaluates on the same first validation batches and stops
at the target. With no `--target`, the target is the value the recipe as given reaches at the end of its planned
run: the first stage's trials record their validation curves, the target is read from its reference's (the worst
of its trials, so every one of them reached it), and each trial's time to it is read off its curve.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...config.recipe import Recipe
from ...errors import AccelError
from ..records import Report, Trial, VariantSummary, Verdict
from ..target import Target, time_to
from ..trial_process import TrialSettings


@dataclass
class Objective:
    """How trials run and which variant of a stage wins; the speed objective leaves trials as the user set them.
    `speed`: under `time`, the settings of the speed-up stages' throughput trials (accel.bench.tune.levers)."""

    name: str = "speed"
    target: Target | None = None
    speed: TrialSettings | None = None
    prune: bool = True  # a learning stage's candidate stops once it cannot be sooner (accel.bench.pruner)

    @property
    def time(self) -> bool:
        return self.name == "time"

    def settings(self, settings: TrialSettings, reference: str | None = None) -> TrialSettings:
        """How a stage's trials run; given its `reference` (run first in each round), its candidates are pruned
        against it."""
        if not self.time:
            return settings
        if self.target is None:  # the first stage: curves, to read the target from
            return replace(settings, curve=True)
        against = reference if self.prune else None
        return replace(settings, target=self.target.arg, stop_at_target=True, deadline_from=against)

    def read(self, trials: list[Trial], reference: str) -> list[Trial]:
        """The stage's trials with their time to the target (set from the reference's curves on the first)."""
        if not self.time:
            return trials
        if self.target is None:
            self.target = reached_by([t for t in trials if t.variant == reference and t.ok])
        return [
            t.updated(time_to_target_s=time_to(self.target, t.target_evals)) if t.target_evals else t for t in trials
        ]

    def pick(self, report: Report) -> tuple[VariantSummary | None, dict[str, str]]:
        """The variant that reached the target measurably sooner than the reference in every trial, soonest
        first; and why each sooner one was passed over."""
        sooner = [
            r for r in report.variants if r.time_to_target_ratio and r.time_to_target_ratio.verdict == Verdict.HELPED
        ]
        passed = {
            r.name: f"reached the target in {r.target_reached} of {len(r.trials)} trials"
            for r in sooner
            if r.errors or r.target_reached != r.ok_trials
        }
        best = min((r for r in sooner if r.name not in passed), key=lambda r: r.time_to_target_s, default=None)
        return best, passed


def time_settings(settings: TrialSettings, base: Recipe, eval_batches: int) -> TrialSettings:
    """Every trial trains on the samples of the planned run at the recipe's batch size and evaluates on the same
    first `eval_batches` validation batches (0: all)."""
    if eval_batches < 0:
        raise AccelError(f"--eval-batches must be >= 0, got {eval_batches}.")
    samples = (settings.steps + settings.warmup) * base.data.batch_size * base.train.grad_accum
    return replace(settings, evaluate=True, samples=samples, eval_batches=eval_batches or None)


def reached_by(trials: list[Trial]) -> Target:
    """The value every trial's curve ended at or beyond: the worst of their last evaluations."""
    ends = [(t.val_metric_name, t.target_evals[-1]["value"]) for t in trials if t.target_evals]
    if not ends:
        raise AccelError(
            "tune --objective time: the recipe as given recorded no validation curve (it needs a validation "
            "split); give --target METRIC=VALUE or a recipe that evaluates."
        )
    metric = ends[0][0] or "val_loss"
    values = [value for _, value in ends]
    probe = Target(metric, values[0])
    return Target(metric, max(values) if probe.minimise else min(values))
