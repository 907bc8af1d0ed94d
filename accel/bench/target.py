"""Time to a target: the wall seconds from a trial's process start (imports, compilation and training included;
the trial's own evaluations, its probes, excluded) until a validation metric first reaches a value. The figure
that catches a speed-up that is fast per step but slows learning."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psutil

from ..callbacks.base import Callback
from ..errors import AccelError, did_you_mean
from ..runs.records import EvalRecord, Record
from ..tasks import reported_metrics
from .pruner import Deadline, Pruned

LOWER_IS_BETTER = ("loss", "perplexity", "bits", "mse", "mae", "error")


@dataclass(frozen=True)
class Target:
    metric: str
    value: float

    @property
    def minimise(self) -> bool:
        return any(word in self.metric for word in LOWER_IS_BETTER)

    def reached(self, value: float) -> bool:
        return value <= self.value if self.minimise else value >= self.value

    @property
    def arg(self) -> str:
        """As --target takes it, exactly."""
        return f"{self.metric}={self.value!r}"

    def __str__(self) -> str:
        return f"{self.metric}{'<=' if self.minimise else '>='}{self.value:g}"


def time_to(target: Target, evals: list[dict[str, Any]]) -> float | None:
    """The wall time of the first evaluation in `evals` (TargetClock's records) that meets `target`, or None."""
    return next((e["wall_s"] for e in evals if target.reached(e["value"])), None)


def parse_target(text: str, any_metric: bool = False) -> Target:
    """`val_accuracy=0.97` -> Target; lower is better for losses, perplexity, bits and errors, else higher. A
    recipe's task names its metrics `val_...`; a script's (`any_metric`) are whatever it logs (`eval_loss`)."""
    metric, sep, value = text.partition("=")
    try:
        if not sep or not metric.strip() or not (any_metric or metric.startswith("val_")):
            raise ValueError
        return Target(metric.strip(), float(value))
    except ValueError:
        example = "eval_loss=2.5 or val_loss=1.5" if any_metric else "val_accuracy=0.97 or val_loss=1.5"
        raise AccelError(
            f"--target {text!r}: write METRIC=VALUE with a validation metric the "
            f"{'script logs' if any_metric else 'task reports'}, e.g. {example}"
        ) from None


def check_target_metric(target: Target, tasks: Iterable[Any]) -> None:
    """Refuse a target whose metric a recipe's task (`tasks`: their `task:` sections) never reports, before any
    trial runs: otherwise every trial fails on it at its first evaluation, minutes in."""
    for cfg in tasks:
        known = reported_metrics(cfg)
        if known is not None and target.metric not in known:
            raise AccelError(
                f"--target {target.arg}: the `{cfg.name}` task reports no `{target.metric}`"
                f"{did_you_mean(target.metric, known)}; its metrics: {', '.join(sorted(known))}."
            )


class TargetClock(Callback):
    """Reads every evaluation: its step, value (the target's metric; with no target, the task's main metric, so a
    target can be set from the curve afterwards) and wall time since the process started less the evaluations so
    far (`eval_s`, theirs included): a run evaluates as its recipe says, not ten times as a timed trial probes it,
    and an evaluation as slow as the training around it would otherwise halve every difference. Notes when the
    target is first met, and with `stop` ends the fit there; with a `deadline_s`, ends it short of the target where
    tune's pruner says so."""

    def __init__(self, target: Target | None, stop: bool = False, deadline_s: float | None = None, warmup: int = 0):
        self.target, self.stop, self.stopped = target, stop, False
        # tune's pruner (accel.bench.pruner), and the optimizer steps it is told of
        self.deadline = Deadline(deadline_s, warmup) if deadline_s is not None and target else None
        self.pruned: Pruned | None = None
        self.steps = 0
        self.started = psutil.Process().create_time()  # the trial process's start, as the OS recorded it
        self.evals: list[dict[str, Any]] = []
        self.reached_s: float | None = None
        self.eval_s, self.last_batch = 0.0, None

    def on_batch_end(self, trainer, info) -> None:
        self.last_batch = time.time()
        self.steps += bool(info.optimizer_stepped)
        if self.deadline is not None and self.reached_s is None:
            now_s = self.last_batch - self.started - self.eval_s
            self._prune(trainer, self.deadline.at_step(self.target, now_s, self.steps))

    def on_log(self, trainer, record: Record) -> None:
        if not isinstance(record, EvalRecord):
            return
        metric = self.target.metric if self.target else trainer.task.main_metric[0]
        if metric not in record.metrics:
            raise AccelError(f"--target: the task reports no `{metric}`; its metrics: {', '.join(record.metrics)}")
        now = time.time()
        self.eval_s += now - (self.last_batch or now)  # the trainer logs an evaluation as soon as it ends
        self.last_batch = now
        wall_s, value = now - self.started - self.eval_s, record.metrics[metric]
        self.evals.append({"step": record.step, "wall_s": wall_s, "value": value, "eval_s": self.eval_s})
        if self.target and self.reached_s is None and self.target.reached(value):
            self.reached_s = wall_s
            if self.stop:  # the rest of the run would only cost time: tune has what it measures
                trainer.should_stop = self.stopped = True
        elif self.deadline is not None:
            self._prune(trainer, self.deadline.at_eval(self.target, self.evals, self.steps))

    def _prune(self, trainer, stop: Pruned | None) -> None:
        if stop is not None:
            self.pruned, trainer.should_stop, self.stopped = stop, True, True

    def result(self) -> dict[str, Any]:
        return {
            "time_to_target_s": self.reached_s,
            "target_evals": self.evals,
            **(self.pruned.record() if self.pruned else {}),
        }
