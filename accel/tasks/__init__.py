"""Tasks: what a training step needs from a batch and a model. The trainer knows nothing of classification.

A task turns `(model, batch)` into a loss, counts the samples in a batch, and owns the evaluation metrics as
per-batch sums on the device (reduced across processes by the trainer; `val_loss` always exists).
"""
from __future__ import annotations

from collections.abc import Callable

from torch import nn

from .base import Task
from .classification import Classification
from .function import FunctionTask, ModelLoss

__all__ = ["Task", "Classification", "FunctionTask", "ModelLoss", "as_task"]


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
