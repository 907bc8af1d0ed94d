"""Tasks: what a training step needs from a batch and a model. The trainer knows nothing of classification.

A task turns `(model, batch)` into a loss, counts the samples (and tokens) in a batch, and owns the evaluation
metrics as per-batch sums on the device (reduced across processes by the trainer; `val_loss` always exists).
Recipes name one under `task:` (accel.registry.TASKS); Python passes a Task or a function to the Trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from ..registry import TASKS
from .base import Task
from .classification import Classification
from .function import FunctionTask, ImportedTask, ModelLoss
from .language_model import LanguageModel
from .regression import Regression

__all__ = [
    "Task",
    "Classification",
    "FunctionTask",
    "ImportedTask",
    "LanguageModel",
    "ModelLoss",
    "Regression",
    "as_task",
    "build_task",
    "reported_metrics",
]


def as_task(task: Task | Callable | None = None, loss_fn: Callable | None = None) -> Task:
    """A Task from what a user passes to the Trainer: a Task, a plain function `(model, batch) -> loss` (or
    `-> (loss, {name: value})`), or nothing, which means `(inputs, targets)` batches scored by `loss_fn`
    (default: cross-entropy)."""
    if task is not None and loss_fn is not None:
        raise TypeError("pass either task= or loss_fn= to the Trainer, not both: a task computes its own loss")
    if isinstance(task, Task):
        return task
    if task is not None:
        return FunctionTask(task)
    return Classification(loss_fn if loss_fn is not None else nn.CrossEntropyLoss())


def build_task(cfg: Any, loss: nn.Module) -> Task:
    """The task a recipe's `task:` section names; `loss` is the recipe's `loss:` (classification, language_model)."""
    return TASKS.get(cfg.name).from_config(cfg, loss)


def reported_metrics(cfg: Any) -> frozenset[str] | None:
    """The validation metrics the task a recipe's `task:` section names may report; None: known only once it runs."""
    return TASKS.get(cfg.name).reported_metrics(cfg)
