"""Regression: `(inputs, targets)` float batches; the loss is a distance between outputs and targets."""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from ..registry import TASKS
from ..schema import StrictModel
from .base import Task

LOSSES = {"mse": F.mse_loss, "l1": F.l1_loss, "smooth_l1": F.smooth_l1_loss}


@TASKS.register("regression")
class Regression(Task):
    """`loss(model(inputs), targets)` with outputs shaped like targets. Evaluation: val_loss, and the mean
    squared and absolute error per target value (val_mse, val_mae)."""

    name = "regression"

    class Config(StrictModel):
        name: Literal["regression"] = "regression"
        loss: Literal["mse", "l1", "smooth_l1"] = Field("mse", description="the training loss")

    @classmethod
    def reported_metrics(cls, cfg: Config) -> frozenset[str]:
        return frozenset({"val_loss", "val_mse", "val_mae"})

    @classmethod
    def from_config(cls, cfg: Config, loss: nn.Module) -> Regression:
        return cls(cfg.loss)

    def __init__(self, loss: str = "mse"):
        self.loss_name, self.loss_fn = loss, LOSSES[loss]

    def loss(self, model: Any, batch: Any) -> torch.Tensor:
        inputs, targets = batch
        return self.loss_fn(model(inputs).view_as(targets), targets)

    def samples(self, batch: Any) -> int:
        return len(batch[1])

    def eval_sums(self, model: Any, batch: Any) -> dict[str, torch.Tensor]:
        inputs, targets = batch
        outputs = model(inputs).float().view_as(targets)
        targets = targets.float()
        return {
            "loss": self.loss_fn(outputs, targets, reduction="sum"),
            "se": F.mse_loss(outputs, targets, reduction="sum"),
            "ae": F.l1_loss(outputs, targets, reduction="sum"),
            "values": torch.full((), targets.numel(), dtype=torch.float64, device=targets.device),
        }

    def metrics(self, totals: dict[str, float]) -> dict[str, float]:
        values = max(totals["values"], 1)
        return {"val_loss": totals["loss"] / values, "val_mse": totals["se"] / values, "val_mae": totals["ae"] / values}
