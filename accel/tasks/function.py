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
        return out["loss"]
    return getattr(out, "loss", out)


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
