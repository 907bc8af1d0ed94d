"""`optim: {name: muon}`: torch's Muon for the hidden weight matrices, AdamW for every other parameter, as one
optimizer (how and why: docs/optimizers.md).

Muon orthogonalises each matrix's momentum (Newton-Schulz) before the step, so a step moves all of a layer's
directions alike; it is meant for the matrices inside a network's repeated blocks. Embeddings, the output head,
norms, biases and tensors of more than two dimensions (convolutions: torch's Muon takes matrices only) stay on
AdamW.
"""

from __future__ import annotations

import fnmatch
import logging
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..errors import AccelError, CheckpointError, did_you_mean
from ..models.blocks import repeated_blocks
from .muon_ns import closure_loss

log = logging.getLogger("accel")
Named = list[tuple[str, nn.Parameter]]


class MuonWithAdamW(torch.optim.Optimizer):
    """Several optimizers stepped as one: `param_groups` are the parts' own group dicts and `state` is one dict
    they all write to, so a schedule, a GradScaler, clipping, zero_grad, step hooks and `state_dict` see a single
    optimizer, and torch's own `state_dict`/`load_state_dict` round-trip it."""

    def __init__(self, parts: list[torch.optim.Optimizer]):
        self.parts = parts
        super().__init__([group for part in parts for group in part.param_groups], defaults={})
        self._link()

    def _link(self) -> None:
        """Point the parts at this optimizer's groups and state (load_state_dict replaces both objects)."""
        start = 0
        for part in self.parts:
            count = len(part.param_groups)
            part.param_groups = self.param_groups[start : start + count]
            part.state = self.state
            start += count

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = closure_loss(closure)
        for part in self.parts:
            part.step()
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        mine = [len(group["params"]) for group in self.param_groups]
        saved = [len(group["params"]) for group in state_dict["param_groups"]]
        if saved != mine:  # torch's own message would name neither the optimizer nor the settings
            raise CheckpointError(
                f"the checkpoint's optimizer has parameter groups of {saved} tensors, this recipe's muon optimizer "
                f"{mine} (Muon, then AdamW's). Resume with the optimizer settings the run started with "
                "(optim.name, optim.muon_params, optim.adamw_params, optim.decay_1d)."
            )
        super().load_state_dict(state_dict)
        self._link()


def split_parameters(model: nn.Module, include: list[str], exclude: list[str]) -> tuple[Named, Named]:
    """(Muon's, AdamW's) parameters, by name. Muon takes the matrices (2-D) among the parameters whose
    names match an `include` pattern, or by default those inside the model's repeated blocks, less any
    matching an `exclude` pattern."""
    named = list(model.named_parameters())
    _check_patterns("optim.adamw_params", exclude, [name for name, _ in named])
    if include:
        _check_patterns("optim.muon_params", include, [name for name, p in named if p.ndim == 2], named)
        chosen = {name for name, _ in named if _matches(name, include)}
    else:
        in_blocks = {id(p) for block in repeated_blocks(model) for p in block.parameters()}
        chosen = {name for name, p in named if id(p) in in_blocks}
    muon = [(n, p) for n, p in named if n in chosen and p.ndim == 2 and not _matches(n, exclude)]
    if not muon:
        raise AccelError(_nothing_for_muon(model, chosen, bool(include)))
    taken = {name for name, _ in muon}
    adamw = [(n, p) for n, p in named if n not in taken]
    _log_split(muon, adamw, [n for n, p in named if n in chosen and p.ndim > 2])
    return muon, adamw


def _matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _check_patterns(key: str, patterns: list[str], names: list[str], named: Named = ()) -> None:
    """A pattern that selects nothing is a typo or names the wrong tensors: say so rather than train without it."""
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            filters = [(n, p) for n, p in named if p.ndim > 2 and fnmatch.fnmatchcase(n, pattern)]
            if filters:
                raise AccelError(
                    f"{key}: `{pattern}` matches no matrix; what it matches includes {_filters_note(filters)}"
                )
            what = "matrix (2-D parameter)" if key == "optim.muon_params" else "parameter"
            raise AccelError(
                f"{key}: `{pattern}` matches no {what} of the model{did_you_mean(pattern, names)}. Patterns are "
                f"fnmatch globs over parameter names such as {', '.join(f'`{n}`' for n in names[:3])}."
            )


def _nothing_for_muon(model: nn.Module, chosen: set[str], explicit: bool) -> str:
    if explicit:
        return "optim.muon_params: every matrix it selects is excluded again by optim.adamw_params; Muon has none."
    where = type(model).__name__
    if not chosen:
        return (
            f"optim muon: {where} has no repeated blocks (a ModuleList or Sequential of same-class modules), so "
            "accel cannot tell its hidden matrices. Name them with optim.muon_params (patterns of parameter "
            "names, e.g. `layers.*.weight`), or use optim.name: adamw."
        )
    filters = [(n, p) for n, p in model.named_parameters() if n in chosen and p.ndim > 2]
    if filters:  # a convolutional net: no pattern can help, so none is suggested
        return f"optim muon: the repeated blocks of {where} hold {_filters_note(filters)} Use optim.name: adamw or sgd."
    return (
        f"optim muon: the repeated blocks of {where} hold no matrix Muon may take (torch's Muon takes "
        "2-D parameters only: norms and biases stay on AdamW). Name matrices with optim.muon_params, or use "
        "optim.name: adamw."
    )


def _filters_note(filters: Named) -> str:
    """Why a convolution's filters cannot go to Muon, said where they are first chosen."""
    name, param = filters[0]
    return (
        f"convolution filters ({len(filters)} tensors of more than 2 dimensions, e.g. `{name}` "
        f"{list(param.shape)}), and torch's Muon orthogonalises 2-D matrices only: accel keeps filters on AdamW "
        "(airbench's Muon flattens each filter to [out, in x kernel], a variant of the algorithm that torch's "
        "Muon does not implement), so no optim.muon_params pattern can give them to Muon."
    )


def _log_split(muon: Named, adamw: Named, higher: list[str]) -> None:
    note = (
        f"; {len(higher)} tensors in the blocks have more than 2 dimensions (e.g. {higher[0]}) and stay on AdamW"
        if higher
        else ""
    )
    log.info(
        "muon: %d matrices (%s parameters) on Muon, %d tensors (%s parameters) on AdamW%s",
        len(muon),
        f"{_numel(muon):,}",
        len(adamw),
        f"{_numel(adamw):,}",
        note,
    )


def _numel(named: Named) -> int:
    return sum(p.numel() for _, p in named)


def refuse_sharded(params: Named) -> None:
    """torch's Muon orthogonalises a whole matrix; FSDP2 gives each process a shard of it (a DTensor), and
    torch's Muon has no sharded implementation, so a sharded run is refused rather than trusted."""
    dtensor = sys.modules.get("torch.distributed.tensor")  # looked up, not imported: see speedups/optim.py
    if dtensor is not None and any(isinstance(p, dtensor.DTensor) for _, p in params):
        raise AccelError(
            "optim muon: torch's Muon orthogonalises each whole matrix and has no implementation for FSDP2's "
            "sharded (DTensor) parameters. Use strategy: ddp (every process holds whole matrices), or optim.name: "
            "adamw with strategy: fsdp."
        )
