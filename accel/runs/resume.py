"""What a resumed run takes from the recipe rather than the checkpoint: the optimizer's hyper-parameters.

The run directory's recipe.yaml is the truth about a run, so a value edited there between runs (optim.lr,
optim.weight_decay, ...) replaces the one in the checkpoint's optimizer state, and the log says so. The one
change that cannot be applied exactly is a new learning rate under a schedule: the schedule's state was
planned around the old peak, so that resume is refused, as a schedule of another length is.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError

log = logging.getLogger("accel")


Changes = list[dict[str, tuple[Any, Any]]]  # per parameter group: {key: (checkpoint's value, recipe's value)}


def optimizer_changes(
    optimizer: torch.optim.Optimizer, saved: dict[str, Any], recipe_optim: Any, scheduled: bool, path: Path
) -> Changes:
    """For each parameter group, the optimizer settings of the recipe that differ from the checkpoint's.
    `optimizer` is freshly built from the recipe, before the checkpoint is loaded into it. Group by group:
    groups of different algorithms (muon's Muon and AdamW) hold different keys, some under one name (`eps`)."""
    keys = [key for key in type(recipe_optim).model_fields if key != "name"]
    changes: Changes = []
    for fresh, old in zip(optimizer.param_groups, saved.get("param_groups", [])):
        changed = {}
        for key in keys:
            # under a schedule a group's lr is the schedule's current value; its peak is kept as max_lr
            # (one-cycle) or initial_lr (the others), set from the recipe's optim.lr when the schedule is built
            name = next((k for k in ("max_lr", "initial_lr") if k in fresh), key) if key == "lr" and scheduled else key
            if name in fresh and name in old and _plain(fresh[name]) != _plain(old[name]):
                changed[key] = (_plain(old[name]), _plain(fresh[name]))
        changes.append(changed)
    lr = _merged(changes).get("lr")
    if scheduled and lr:
        old, new = lr
        raise CheckpointError(
            f"optim.lr is {new:g} in the recipe but {old:g} in checkpoint {path}, and the learning-rate schedule "
            "in the checkpoint was planned around the old value, so the new one cannot take over mid-run. Resume "
            f"with optim.lr: {old:g}, or start a new run directory with the new rate."
        )
    return changes


def apply_recipe_values(optimizer: torch.optim.Optimizer, changes: Changes) -> None:
    """Set the recipe's values over the loaded optimizer state, and say what changed."""
    merged = _merged(changes)
    if not merged:
        return
    for group, changed in zip(optimizer.param_groups, changes):
        for key, (_, new) in changed.items():
            if isinstance(group[key], torch.Tensor):
                group[key].fill_(new)
            else:
                group[key] = tuple(new) if isinstance(group[key], tuple) else new
    log.info(
        "resume: the recipe's optimizer settings replace the checkpoint's: %s",
        ", ".join(f"optim.{key} {old} -> {new}" for key, (old, new) in merged.items()),
    )


def _merged(changes: Changes) -> dict[str, tuple[Any, Any]]:
    merged: dict[str, tuple[Any, Any]] = {}
    for changed in changes:
        for key, values in changed.items():
            merged.setdefault(key, values)
    return merged


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):  # a capturable or fused optimizer may hold its lr as a tensor
        return value.item()
    return list(value) if isinstance(value, tuple) else value
