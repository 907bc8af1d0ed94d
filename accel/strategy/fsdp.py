"""`fsdp`: parameters, gradients and optimizer state sharded across processes with FSDP2 (accel.strategy.sharding)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..errors import AccelError
from . import sharding
from .base import Strategy

if TYPE_CHECKING:
    from .world import World


class FullyShard(Strategy):
    """Shards the model before the optimizer is built; gradients are reduce-scattered on stepping micro-batches."""

    name = "fsdp"
    follows_device = False  # the recipe asked for it: a speed-up that cannot run sharded refuses the run

    def prepare(self, model: nn.Module) -> nn.Module:
        return sharding.shard_model(model)

    def no_sync(self, module: nn.Module) -> AbstractContextManager:
        return sharding.no_gradient_sync(module)

    def eval_forwards_short(self, batches: int, world: World, device: torch.device) -> int:
        """A sharded model gathers its weights collectively in every forward, so each rank runs as many
        evaluation forwards as the rank with the most batches."""
        short = world.max(batches, device) - batches
        if short and batches == 0:
            raise AccelError(
                f"rank {world.rank} has no validation samples: with strategy fsdp, every "
                "process needs at least one (a larger validation split, or fewer processes)"
            )
        return short

    def full_state_dicts(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
        return sharding.full_state_dicts(module, optimizer)  # collective: only rank 0's holds the state

    def load_full_state_dicts(
        self, module: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict, optim_state: dict
    ) -> None:
        sharding.load_full_state_dicts(module, optimizer, model_state, optim_state)  # collective: the same file
