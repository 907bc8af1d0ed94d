"""`strategy: fsdp`: parameters, gradients and optimizer state sharded across processes with FSDP2.

Each block of the model holds only its 1/N slice of every parameter and gathers the rest just for its own
forward and backward. Checkpoints still hold whole, plain tensors keyed like a single process's, so they load
with weights_only, resume under ddp as under fsdp, and feed `accel export`. Gathering and scattering them is
collective: every rank calls `full_state_dicts` and `load_full_state_dicts`, and rank 0 writes the file.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from torch.distributed.fsdp import FSDPModule

# FSDP and torch.distributed.checkpoint are imported by the functions that shard or gather, not here: importing
# them pulls in DTensor and costs 1-3 s of start-up on 2 cores, which every one-process run would pay for nothing.
CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def is_sharded(module: nn.Module) -> bool:
    """Whether fully_shard sharded `module`; answered without importing FSDP when nothing has imported it (then
    nothing can have been sharded)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(module, fsdp.FSDPModule)


def unsharded_class(module: nn.Module) -> type:
    """The model's own class: fully_shard swaps it for a subclass named FSDP<Name>."""
    return type(module).__bases__[-1] if is_sharded(module) else type(module)


def shard_model(model: nn.Module) -> nn.Module:
    """Shard `model` in place: each block is a unit of its own, so only one block is whole at a time.

    A block is a child of the model, or of a container (Sequential, ModuleList, ModuleDict) inside it, that
    holds parameters: a ResNet's stem, its residual blocks and its head; a transformer's layers. Units are
    sharded bottom-up and the model last, as FSDP2 requires. Build the optimizer afterwards: sharding
    replaces every parameter with a DTensor.
    """
    from torch.distributed.fsdp import fully_shard

    for block in _blocks(model):
        fully_shard(block)
    fully_shard(model)
    return model


def _blocks(module: nn.Module) -> Iterator[nn.Module]:
    for child in module.children():
        if isinstance(child, CONTAINERS):
            yield from _blocks(child)
        elif any(True for _ in child.parameters()):
            yield child


def no_gradient_sync(module: nn.Module):
    """For micro-batches that do not step: gradients accumulate unsharded and are reduced on the last one."""
    return _sync_off(module) if is_sharded(module) else nullcontext()


@contextmanager
def _sync_off(module: FSDPModule) -> Iterator[None]:
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def full_state_dicts(module: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Collective. On rank 0: the model's and optimizer's whole state on the CPU, in the layout
    `module.state_dict()` and `optimizer.state_dict()` of an unsharded model have. Other ranks get empty dicts."""
    from torch.distributed.checkpoint import state_dict as dcp

    gather = dcp.StateDictOptions(full_state_dict=True, cpu_offload=True)  # whole tensors, on rank 0 only
    model_state = dcp.get_model_state_dict(module, options=gather)
    optim_state = dcp.get_optimizer_state_dict(module, optimizer, options=gather)
    if optim_state:  # keyed by parameter name; checkpoints key by position, as torch.optim does
        optim_state = _rekey(optim_state, {name: i for i, name in enumerate(_names(module, optimizer))})
    return model_state, optim_state


def load_full_state_dicts(
    module: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict[str, Any], optim_state: dict[str, Any]
) -> None:
    """Collective: every rank passes the same whole state and keeps its own slice of it."""
    from torch.distributed.checkpoint import state_dict as dcp

    scatter = dcp.StateDictOptions(full_state_dict=True)  # every rank reads the whole tensors, keeps its slice
    dcp.set_model_state_dict(module, model_state, options=scatter)
    by_name = _rekey(optim_state, dict(enumerate(_names(module, optimizer))))
    dcp.set_optimizer_state_dict(module, optimizer, by_name, options=scatter)


def _names(module: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Parameter names in the order torch.optim numbers them: group by group."""
    name_of = {id(p): name for name, p in module.named_parameters()}
    return [name_of[id(p)] for group in optimizer.param_groups for p in group["params"]]


def _rekey(state: dict[str, Any], key: dict) -> dict[str, Any]:
    return {
        "state": {key[k]: v for k, v in state["state"].items()},
        "param_groups": [{**group, "params": [key[p] for p in group["params"]]} for group in state["param_groups"]],
    }
