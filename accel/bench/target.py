"""Time to a target: the wall seconds from a trial's process start (imports, compilation and evaluation
included) until a validation metric first reaches a value. The figure that catches a speed-up that is fast per
step but slows learning."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import psutil

from ..callbacks.base import Callback
from ..errors import AccelError

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

    def __str__(self) -> str:
        return f"{self.metric}{'<=' if self.minimise else '>='}{self.value:g}"


def parse_target(text: str) -> Target:
    """`val_accuracy=0.97` -> Target; lower is better for losses, perplexity, bits and errors, else higher."""
    metric, sep, value = text.partition("=")
    try:
        if not sep or not metric.startswith("val_"):
            raise ValueError
        return Target(metric.strip(), float(value))
    except ValueError:
        raise AccelError(
            f"--target {text!r}: write METRIC=VALUE with a validation metric of the task, e.g. "
            "val_accuracy=0.97 or val_loss=1.5"
        ) from None


class TargetClock(Callback):
    """Reads every evaluation; notes the wall time since the process started when the target is first met."""

    def __init__(self, target: Target):
        self.target = target
        self.started = psutil.Process().create_time()  # the trial process's start, as the OS recorded it
        self.evals: list[dict[str, Any]] = []
        self.reached_s: float | None = None

    def on_log(self, trainer, record: dict[str, Any]) -> None:
        if record["kind"] != "eval":
            return
        if self.target.metric not in record:
            raise AccelError(
                f"--target: the task reports no `{self.target.metric}`; its metrics: "
                f"{', '.join(k for k in record if k.startswith('val_'))}"
            )
        wall_s, value = time.time() - self.started, record[self.target.metric]
        self.evals.append({"step": record["step"], "wall_s": wall_s, "value": value})
        if self.reached_s is None and self.target.reached(value):
            self.reached_s = wall_s

    def result(self) -> dict[str, Any]:
        return {"time_to_target_s": self.reached_s, "target_evals": self.evals}
