"""Tasks defined by a function, and models that compute their own loss (the Hugging Face convention)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Literal

import torch
from pydantic import Field
from torch import nn

from ..errors import AccelError
from ..registry import IMPORTED, TASKS, import_attribute
from ..schema import StrictModel
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
            raise AccelError(
                f"the task function {getattr(self.fn, '__name__', self.fn)!r} must return a scalar "
                f"loss tensor (or (loss, {{name: value}})), got {type(loss).__name__}"
            )
        return loss, extra

    def loss(self, model: Any, batch: Any) -> torch.Tensor:
        return self._call(model, batch)[0]

    def eval_sums(self, model: Any, batch: Any) -> dict[str, torch.Tensor]:
        loss, extra = self._call(model, batch)
        n = self.samples(batch)
        return {
            "loss": loss.detach().float() * n,
            **{name: torch.as_tensor(value, device=loss.device).detach().float() * n for name, value in extra.items()},
        }


@TASKS.register("model_loss")
class ModelLoss(FunctionTask):
    """The model's forward returns its loss, or a dict or object holding `loss`: `model(**batch)` for a dict
    batch, `model(*batch)` for a tuple, `model(batch)` otherwise."""

    name = "model_loss"

    class Config(StrictModel):
        name: Literal["model_loss"] = "model_loss"

    @classmethod
    def reported_metrics(cls, cfg: Config) -> frozenset[str]:
        return frozenset({"val_loss"})

    @classmethod
    def from_config(cls, cfg: Config, loss: nn.Module) -> ModelLoss:
        return cls()

    def tokens(self, batch: Any) -> int | None:
        ids = batch.get("input_ids") if isinstance(batch, Mapping) else None
        return ids.numel() if isinstance(ids, torch.Tensor) else None

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
        loss = out.get("loss")
    elif isinstance(out, (tuple, list)):  # nanoGPT's (logits, loss); Hugging Face's (loss, logits, ...) unwrapped
        scalars = [item for item in out if isinstance(item, torch.Tensor) and item.dim() == 0]
        loss = scalars[0] if len(scalars) == 1 else None
    else:
        loss = getattr(out, "loss", out)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise AccelError(
            f"task model_loss: the model's forward returned {_describe(out)}, with no loss in it. model_loss needs "
            "the loss: a scalar tensor, a dict or object with `loss`, or a tuple holding one scalar tensor "
            "(nanoGPT's `(logits, loss)`). The batch is passed as model(*batch) for a tuple, model(**batch) for a "
            "dict: check that the targets reach the forward, so that it computes the loss; or, for a model that "
            "returns logits, use task: classification or language_model."
        )
    return loss


def _describe(value: Any) -> str:
    """What a forward returned, in a message: types and shapes, never values."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    if isinstance(value, Mapping):
        return f"a dict of {', '.join(map(str, value)) or 'nothing'}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of ({', '.join(_describe(item) for item in value)})"
    return "None" if value is None else f"a {type(value).__name__}"


@TASKS.register(IMPORTED)
class ImportedTask:
    """A user's task named by import string: a Task subclass (built with `args`) or a function
    `(model, batch) -> loss`."""

    class Config(StrictModel):
        name: str = Field(pattern=r"^[\w.]+:[\w.]+$", description="`package.module:attribute`")
        args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for a Task class")

    @staticmethod
    def reported_metrics(cfg: Config) -> None:
        return None  # the user's task: its metrics are known once it runs

    @staticmethod
    def from_config(cfg: Config, loss: nn.Module) -> Task:
        target = import_attribute(cfg.name)
        if inspect.isclass(target) and issubclass(target, Task):
            return target(**cfg.args)
        if callable(target) and not inspect.isclass(target) and not cfg.args:
            return FunctionTask(target)
        raise AccelError(
            f"task `{cfg.name}` must be a subclass of accel.tasks.Task (args are passed to it) or a "
            "function (model, batch) -> loss without args"
        )
