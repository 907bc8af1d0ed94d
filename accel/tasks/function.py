"""Tasks defined by a function, and models that compute their own loss (the Hugging Face convention)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..errors import AccelError
from .base import Task


class FunctionTask(Task):
    """`fn(model, batch) -> loss` or `-> (loss, {name: value})`; the extra values are averaged in evaluation."""

    name = "function"

    def __init__(self, fn: Callable):
        self.fn = fn

    def _call(self, model: Any, batch: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        out = self.fn(model, batch)
        loss, extra = out if isinstance(out, tuple) else (out, {})
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            raise AccelError(f"the task function {getattr(self.fn, '__name__', self.fn)!r} must return a scalar "
                             f"loss tensor (or (loss, {{name: value}})), got {type(loss).__name__}")
        return loss, extra

    def loss(self, model: Any, batch: Any) -> torch.Tensor:
        return self._call(model, batch)[0]

    def eval_sums(self, model: Any, batch: Any) -> dict[str, torch.Tensor]:
        loss, extra = self._call(model, batch)
        n = self.samples(batch)
        return {"loss": loss.detach().float() * n,
                **{name: torch.as_tensor(value, device=loss.device).detach().float() * n
                   for name, value in extra.items()}}


class ModelLoss(FunctionTask):
    """The model's forward returns its loss, or a dict or object holding `loss`: `model(**batch)` for a dict
    batch, `model(*batch)` for a tuple, `model(batch)` otherwise."""

    name = "model_loss"

    def __init__(self):
        super().__init__(model_loss)


def model_loss(model: Any, batch: Any) -> torch.Tensor:
    if isinstance(batch, Mapping):
        out = model(**batch)
    elif isinstance(batch, (tuple, list)):
        out = model(*batch)
    else:
        out = model(batch)
    if isinstance(out, Mapping):
        return out["loss"]
    return getattr(out, "loss", out)
