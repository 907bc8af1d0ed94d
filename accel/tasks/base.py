"""The task interface. Every method has a default that fits most tasks, so a task overrides only what differs."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from ..batches import tensors


def leading_size(batch: Any) -> int:
    """Samples in a batch of any nesting: the leading dimension of its first tensor that has one."""
    for tensor in tensors(batch):
        if tensor.dim() > 0:
            return len(tensor)
    return 1


class Task(ABC):
    """Loss, sample count and evaluation sums for one kind of training.

    `eval_sums` returns device tensors that the trainer adds up over the validation batches and across processes
    (no sync per batch); `metrics` turns the totals into the reported numbers.
    """

    name = "task"
    main_metric = ("val_loss", "min")  # what "better results" means: a metric and whether to minimise it

    @abstractmethod
    def loss(self, model: Any, batch: Any) -> torch.Tensor:
        """The training loss of `model` on `batch` (a scalar tensor)."""

    def samples(self, batch: Any) -> int:
        return leading_size(batch)

    def tokens(self, batch: Any) -> int | None:
        """Tokens in a batch, for tasks on sequences (tokens/s); None where the word means nothing."""
        return None

    def eval_sums(self, model: Any, batch: Any) -> dict[str, torch.Tensor]:
        """The evaluation loss summed over the batch's samples; `count` is added by the trainer."""
        return {"loss": self.loss(model, batch).detach().float() * self.samples(batch)}

    def metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """Means per sample of every summed value, named `val_<name>`."""
        count = max(totals.pop("count"), 1)
        return {f"val_{name}": value / count for name, value in totals.items()}
