"""Stops a run when an epoch metric has not improved for `patience` epochs."""

from __future__ import annotations

import logging
import math
from typing import Any

from ..errors import AccelError, did_you_mean
from ..runs.records import EpochRecord
from .base import Callback

log = logging.getLogger("accel")


class EarlyStopping(Callback):
    state_name = "early_stopping"

    def __init__(self, monitor: str = "val_loss", mode: str = "min", patience: int = 3, min_delta: float = 0.0):
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, min_delta
        self.best = math.inf if mode == "min" else -math.inf
        self.bad_epochs = 0

    def on_epoch_end(self, trainer, record: EpochRecord) -> None:
        value = record.named(self.monitor)
        if value is None:
            if record.metrics:  # an evaluated epoch without the metric: a name the task does not report
                metrics = ", ".join([*record.metrics, "train_loss"])
                raise AccelError(
                    f"train.early_stopping.monitor: `{self.monitor}` is not a metric of this run's task"
                    f"{did_you_mean(self.monitor, list(record.model_dump()))}. Its metrics: {metrics}."
                )
            return
        better = value < self.best - self.min_delta if self.mode == "min" else value > self.best + self.min_delta
        if better:
            self.best, self.bad_epochs = value, 0
            return
        self.bad_epochs += 1
        if self.bad_epochs >= self.patience:
            log.warning(
                "early stopping: %s has not improved for %d epochs (best %.4g)",
                self.monitor,
                self.bad_epochs,
                self.best,
            )
            trainer.should_stop = True

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state.get("best", self.best)
        self.bad_epochs = state.get("bad_epochs", 0)
