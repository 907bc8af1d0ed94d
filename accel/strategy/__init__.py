"""How the processes share the model and run backward and the step: plain, ddp, fsdp or xla.

The run chooses one (`choose`); the trainer calls its `backward` and `optimizer_step`, and it hands their numeric
part to a Precision (accel.strategy.precision), so any strategy combines with any precision it does not refuse.
"""

from __future__ import annotations

import logging

import torch

from ..errors import AccelError
from .base import Strategy
from .ddp import DataParallel
from .fsdp import FullyShard
from .world import World

log = logging.getLogger("accel")
__all__ = ["DataParallel", "FullyShard", "Strategy", "choose"]


def choose(requested: str, world: World, device: torch.device) -> Strategy:
    """The strategy for the recipe's `strategy` on this device and number of processes."""
    if device.type == "xla":
        if requested == "fsdp":
            raise AccelError(
                "strategy: fsdp shards with torch.distributed's FSDP2 (CPU and CUDA); on XLA use "
                "`strategy: ddp` (torch_xla's own FSDP is not wired into accel)"
            )
        from .xla import Xla

        return Xla(device, world.distributed)
    if requested == "fsdp" and not world.distributed:
        log.info("strategy fsdp: one process has nothing to shard with; training unsharded")
    if not world.distributed:
        return Strategy()
    return FullyShard() if requested == "fsdp" else DataParallel()
