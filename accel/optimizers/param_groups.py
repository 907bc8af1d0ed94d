"""Parameter groups by name: which parameters weight decay leaves alone, and per-pattern settings
(docs/optimizers.md, "Parameter groups").

By default AdamW decays only parameters of two or more dimensions (weight matrices, embeddings, filters): biases
and norm weights stay undecayed, as nanoGPT, timm and Hugging Face train them. `optim.groups` gives parameters
chosen by fnmatch patterns over their names their own learning rate or weight decay.

Groups carry their parameters' names (torch's `param_names`), so a checkpoint says which tensor each state
belongs to. One written by an older accel (a single group, or another split) is re-grouped on resume by name
(`regroup`): every tensor keeps its optimizer state and takes the recipe's settings for its new group.
"""

from __future__ import annotations

import fnmatch
import logging
from typing import Any

import torch
from pydantic import Field
from torch import nn

from ..errors import AccelError, did_you_mean
from ..schema import StrictModel

log = logging.getLogger("accel")
Named = list[tuple[str, nn.Parameter]]


class ParamGroupConfig(StrictModel):
    params: list[str] = Field(
        min_length=1, description="fnmatch patterns of parameter names (`blocks.*.attn.*`, `*.bias`)"
    )
    lr: float | None = Field(None, gt=0, description="this group's peak learning rate; null: optim.lr")
    weight_decay: float | None = Field(
        None, ge=0, description="this group's weight decay, 1-D parameters included; null: optim.weight_decay"
    )


def param_groups(
    named: Named, extra: list[ParamGroupConfig], decay_1d: bool, names: list[str] | None = None
) -> list[dict[str, Any]]:
    """torch param groups of the `named` parameters: each of `extra` (optim.groups) takes the parameters its
    patterns match first; the rest form the default group, split by dimension where `decay_1d` is false (those of
    one dimension or none get no weight decay). Empty groups are left out; every group names its parameters.
    A pattern must match one of `names` (the model's: muon groups only its AdamW part's `named`)."""
    names = names if names is not None else [name for name, _ in named]
    for i, group in enumerate(extra):
        for pattern in group.params:
            if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
                raise AccelError(
                    f"optim.groups[{i}].params: `{pattern}` matches no parameter of the model"
                    f"{did_you_mean(pattern, names)}. Patterns are fnmatch globs over parameter names such as "
                    f"{', '.join(f'`{n}`' for n in names[:3])}."
                )
    chosen: dict[Any, list[tuple[str, nn.Parameter]]] = {}
    for name, param in named:
        mine = next((i for i, g in enumerate(extra) if any(fnmatch.fnmatchcase(name, p) for p in g.params)), None)
        key = mine if mine is not None else ("decay" if decay_1d or param.ndim >= 2 else "no_decay")
        chosen.setdefault(key, []).append((name, param))
    groups = []
    for key in ["decay", "no_decay", *range(len(extra))]:
        if key not in chosen:
            continue
        settings = {"weight_decay": 0.0} if key == "no_decay" else {}
        if isinstance(key, int):
            own = extra[key]
            settings = {k: v for k, v in (("lr", own.lr), ("weight_decay", own.weight_decay)) if v is not None}
        groups.append({"params": chosen[key], **settings})
    return groups


def older_order(optimizer: torch.optim.Optimizer, model_order: list[str]) -> list[str]:
    """The parameter order of the state an older accel wrote for this optimizer, which named no parameters: each
    part's parameters (muon: Muon's, then AdamW's; otherwise the one optimizer's) in the model's order."""
    rank = {name: i for i, name in enumerate(model_order)}
    parts = getattr(optimizer, "parts", [optimizer])
    return [
        name
        for part in parts
        for name in sorted((n for g in part.param_groups for n in g.get("param_names", [])), key=rank.__getitem__)
    ]


def group_names(groups: list[dict[str, Any]], order: list[str]) -> list[list[str]] | None:
    """Each saved group's parameter names: torch's `param_names`, FQNs where the state is keyed by name (a
    gathered FSDP state), else by position in `order` (an older accel's layout: `older_order`); None where they
    cannot be known."""
    named = []
    for group in groups:
        if "param_names" in group:
            named.append(list(group["param_names"]))
        elif all(isinstance(p, str) for p in group["params"]):
            named.append(list(group["params"]))
        elif all(isinstance(p, int) and 0 <= p < len(order) for p in group["params"]):
            named.append([order[p] for p in group["params"]])
        else:
            return None
    return named


def regroup(
    saved: dict[str, Any], optimizer: torch.optim.Optimizer, model_order: list[str], path: Any
) -> dict[str, Any]:
    """`saved` (an optimizer state_dict) laid out as `optimizer`'s groups, by parameter name: each tensor keeps its
    state, each group takes the recipe's settings (the fresh group's). Unchanged where the layouts agree."""
    fresh = optimizer.state_dict()["param_groups"]
    if not all("param_names" in group for group in fresh):  # not grouped by accel: its own loader decides
        return saved
    order = older_order(optimizer, model_order)
    new_names, old_names = group_names(fresh, order), group_names(saved.get("param_groups", []), order)
    if new_names is None or old_names is None or new_names == old_names:
        return saved
    old_index = {name: (g, i) for g, names in enumerate(old_names) for i, name in enumerate(names)}
    if sorted(old_index) != sorted(name for names in new_names for name in names):
        return saved  # other parameters: the model check or torch's own refuses it, naming them
    ids = [pid for group in saved["param_groups"] for pid in group["params"]]
    flat = {name: ids[sum(len(n) for n in old_names[:g]) + i] for name, (g, i) in old_index.items()}
    state, groups, next_id = {}, [], 0
    for names in new_names:
        first = saved["param_groups"][old_index[names[0]][0]]
        keyed_by_name = isinstance(first["params"][0], str)
        params = names if keyed_by_name else list(range(next_id, next_id + len(names)))
        for name, pid in zip(names, params):
            if flat[name] in saved["state"]:
                state[pid] = saved["state"][flat[name]]
        next_id += len(names)
        # the schedule's bookkeeping (initial_lr, max_lr, ...) and every setting come from the group it was in;
        # the recipe's lr and weight_decay for its new group are applied after loading (accel/runs/resume.py)
        groups.append({**first, "params": params, "param_names": names})
    log.warning(
        "%s: the optimizer's parameter groups differ from this recipe's (%s, now %s): each tensor keeps its "
        "optimizer state in its new group, with that group's settings. An older accel put every parameter in one "
        "group; accel now leaves 1-D parameters (biases, norms) without AdamW's weight decay, unless "
        "optim.decay_1d: true, which keeps decaying them as the run did.",
        path,
        _sizes(old_names),
        _sizes(new_names),
    )
    return {**saved, "state": state, "param_groups": groups}


def _sizes(names: list[list[str]]) -> str:
    return " + ".join(f"{len(group)} tensors" for group in names)
