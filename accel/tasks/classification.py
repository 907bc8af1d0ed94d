"""Classification: `(inputs, targets)` batches, a loss function of `(outputs, targets)`, accuracy when it fits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import nn

from ..errors import AccelError
from ..registry import TASKS
from ..schema import StrictModel
from .base import Task, logits_of


@TASKS.register("classification")
class Classification(Task):
    """`loss_fn(model(inputs), targets)`. With cross-entropy (the default), the scores are read from whatever the
    model returns (`logits_of`: a tensor, a dict or object with `logits`, a tuple's first element) and evaluation
    reports the plain cross-entropy and accuracy; a user's `loss_fn` gets the outputs as they are, and evaluation
    reports that loss, plus accuracy where the outputs are class scores `[N, C]` for integer targets `[N]`. Any
    output and target shapes work (sequences, regression)."""

    name = "classification"
    main_metric = ("val_accuracy", "max")

    class Config(StrictModel):
        name: Literal["classification"] = "classification"

    @classmethod
    def reported_metrics(cls, cfg: Config) -> frozenset[str]:
        return frozenset({"val_loss", "val_accuracy"})  # accuracy only where the outputs are class scores

    @classmethod
    def from_config(cls, cfg: Config, loss: nn.Module) -> Classification:
        return cls(loss)

    def __init__(self, loss_fn: Callable | None = None):
        self.loss_fn = loss_fn if loss_fn is not None else nn.CrossEntropyLoss()
        # eval ignores training-only settings such as label smoothing: the plain cross-entropy of the predictions
        self.cross_entropy = isinstance(self.loss_fn, nn.CrossEntropyLoss)

    def loss(self, model: Any, batch: Any) -> torch.Tensor:
        inputs, targets = batch
        outputs = model(inputs)
        loss = self.loss_fn(logits_of(outputs) if self.cross_entropy else outputs, targets)
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:  # torch would say it in backward, of a "grad"
            what = f"a loss of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise AccelError(
                f"loss_fn returned {what}, not one number in a tensor: a training step needs the "
                "batch's loss as a scalar. Use a loss that reduces (reduction='mean', the default: not "
                "reduction='none'), or pass one that does, e.g. `lambda out, y: fn(out, y).mean()`."
            )
        return loss

    def samples(self, batch: Any) -> int:
        return len(batch[1])

    def eval_sums(self, model: Any, batch: Any) -> dict[str, torch.Tensor]:
        inputs, targets = batch
        outputs = model(inputs)
        n = len(targets)
        if self.cross_entropy:
            outputs = logits_of(outputs)
            loss = nn.functional.cross_entropy(outputs.float(), targets, reduction="sum")
        else:
            loss = self.loss_fn(outputs, targets).detach().float() * n
        sums = {"loss": loss}
        scores = isinstance(outputs, torch.Tensor) and outputs.dim() == 2
        if scores and targets.dim() == 1 and not targets.is_floating_point():
            sums["accuracy"] = (outputs.argmax(1) == targets).sum().float()
        return sums
