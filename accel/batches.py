"""Batches of any nesting: tuples, lists, dicts, namedtuples and dataclasses of tensors, walked with torch's
own pytree utilities. Dataclasses are registered with pytree the first time one is seen."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
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
    return next((t for t in map(leading_tensor, _children(batch)) if t is not None), None)


def leading_size(batch: Any) -> int:
    """Samples in a batch of any nesting: the leading dimension of its first tensor that has one (1 for none)."""
    leading = leading_tensor(batch)
    return len(leading) if leading is not None else 1


def _register_dataclasses(obj: Any) -> None:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type) and type(obj) not in pytree.SUPPORTED_NODES:
        pytree.register_dataclass(type(obj))
    for child in _children(obj):
        _register_dataclasses(child)


def _children(obj: Any) -> Iterable[Any]:
    """What a container of a batch holds (a list's or tuple's items, a dict's values, a dataclass's fields); nothing
    for anything else."""
    if isinstance(obj, (list, tuple)):
        return obj
    if isinstance(obj, dict):
        return obj.values()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (getattr(obj, f.name) for f in dataclasses.fields(obj))
    return ()
