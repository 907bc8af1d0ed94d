"""The task interface. Every method has a default that fits most tasks, so a task overrides only what differs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import torch

from ..batches import leading_size
from ..errors import AccelError


def logits_of(outputs: Any) -> torch.Tensor:
    """A model's scores, however its forward returns them: a tensor, a dict or object holding `logits` (Hugging
    Face outputs, a user's dataclass), or a tuple whose first element they are (`(logits, aux)`, torchvision's
    GoogLeNet and Inception outputs)."""
    logits = _find_logits(outputs)
    if not logits.is_floating_point():  # torch would blame the targets ("expected floating point type for target")
        raise AccelError(
            f"the model returned {logits.dtype} outputs of shape {list(logits.shape)}, not scores: cross-entropy "
            "needs floating-point scores (logits), one per class. Return the scores before any argmax or "
            "rounding; take the argmax for predictions outside the model's forward."
        )
    return logits


def _find_logits(outputs: Any) -> torch.Tensor:
    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, Mapping):
        if "logits" not in outputs:
            raise AccelError(
                f"the model returned a dict without `logits` (keys: {', '.join(map(str, outputs))}); "
                "return the scores under `logits`, or give the recipe a task that reads them"
            )
        return outputs["logits"]
    if hasattr(outputs, "logits"):
        return outputs.logits
    if isinstance(outputs, (tuple, list)) and outputs and isinstance(outputs[0], torch.Tensor):
        return outputs[0]
    raise AccelError(
        f"the model returned {type(outputs).__name__}, not scores: return a tensor, a dict or object "
        "with `logits`, or a tuple whose first element is the scores"
    )


class Task(ABC):
    """Loss, sample count and evaluation sums for one kind of training.

    `eval_sums` returns device tensors that the trainer adds up over the validation batches and across processes
    (no sync per batch); `metrics` turns the totals into the reported numbers.
    """

    name = "task"
    main_metric = ("val_loss", "min")  # what "better results" means: a metric and whether to minimise it

    @classmethod
    def reported_metrics(cls, cfg: Any) -> frozenset[str] | None:
        """The validation metrics a task built from `cfg` may report, so a `--target` naming another fails before
        any trial runs; None where only running the task can tell (a user's task may add its own)."""
        return None

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
