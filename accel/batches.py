"""Batches of any nesting: tuples, lists, dicts, namedtuples and dataclasses of tensors, walked with torch's
own pytree utilities. Dataclasses are registered with pytree the first time one is seen."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree


def map_tensors(fn: Callable[[torch.Tensor], Any], batch: Any) -> Any:
    """`batch` with `fn` applied to every tensor in it; everything else is kept as it is."""
    _register_dataclasses(batch)
    return pytree.tree_map_only(torch.Tensor, fn, batch)


def tensors(batch: Any) -> list[torch.Tensor]:
    _register_dataclasses(batch)
    return [leaf for leaf in pytree.tree_leaves(batch) if isinstance(leaf, torch.Tensor)]


def leading_tensor(batch: Any) -> torch.Tensor | None:
    """The batch's first tensor with a leading (batch) dimension, or None. Walked to the first such tensor, not
    flattened whole: a hand-written loop's engine asks this in every training forward."""
    if isinstance(batch, torch.Tensor):
        return batch if batch.dim() > 0 else None
    if isinstance(batch, dict):
        children = batch.values()
    elif isinstance(batch, (list, tuple)):
        children = batch
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        children = (getattr(batch, f.name) for f in dataclasses.fields(batch))
    else:
        return None
    return next((t for t in map(leading_tensor, children) if t is not None), None)


def leading_size(batch: Any) -> int:
    """Samples in a batch of any nesting: the leading dimension of its first tensor that has one (1 for none)."""
    leading = leading_tensor(batch)
    return len(leading) if leading is not None else 1


def _register_dataclasses(obj: Any) -> None:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if type(obj) not in pytree.SUPPORTED_NODES:
            pytree.register_dataclass(type(obj))
        children = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    elif isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        children = list(obj)
    else:
        return
    for child in children:
        _register_dataclasses(child)
