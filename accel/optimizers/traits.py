"""What an optimizer can do, asked of this torch: a fused kernel for its parameters, a foreach implementation, a
`capturable` option. The conflict rule reads them before setup (accel.speedups.base.RunFacts); `optim` switches to
the kernel they name."""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch


@dataclass(frozen=True)
class OptimizerTraits:
    """What speed-ups may ask of a run's optimizer before they are set up."""

    name: str  # its class's name, for messages
    foreach: bool  # a foreach (multi-tensor) implementation
    capturable: bool  # keeps its step counts and reads a tensor learning rate on the device (CUDA graphs)
    known_fused: bool | None = None  # `fused` as recorded elsewhere (a script's probe), or None: not known
    optimizer: torch.optim.Optimizer | None = field(default=None, compare=False, repr=False)

    @cached_property
    def fused(self) -> bool | None:
        """A fused kernel for its parameters' device and dtype; None: not known. Asked of the optimizer when first
        read (a throwaway step): a run whose speed-ups never ask steps no fused kernel it did not choose."""
        return fused_works(self.optimizer) if self.optimizer is not None else self.known_fused

    def to_data(self) -> dict[str, Any]:
        return {"name": self.name, "foreach": self.foreach, "capturable": self.capturable, "fused": self.fused}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> OptimizerTraits:
        return cls(data["name"], data["foreach"], data["capturable"], known_fused=data.get("fused"))


def optimizer_traits(optimizer: torch.optim.Optimizer, fused_known: bool = True) -> OptimizerTraits:
    """`optimizer`'s traits; `fused_known` False: its parameters are not on the run's device (tune's stand-in), so
    whether a fused kernel works there is left unknown."""
    cls = type(optimizer)
    return OptimizerTraits(
        name=cls.__name__,
        foreach="foreach" in accepted(cls),
        capturable=bool(optimizer.param_groups) and all("capturable" in g for g in optimizer.param_groups),
        optimizer=optimizer if fused_known else None,
    )


def accepted(cls: type) -> set[str]:
    """The keyword arguments optimizer class `cls` takes."""
    return set(inspect.signature(cls.__init__).parameters)


def constructor_kwargs(optimizer: torch.optim.Optimizer, flags: dict[str, bool]) -> dict[str, Any]:
    """`optimizer`'s defaults with `flags` over them, as its class's constructor takes them."""
    taken = accepted(type(optimizer))
    return {k: v for k, v in {**optimizer.defaults, **flags}.items() if k in taken}


def fused_works(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer`'s class has a fused kernel for its parameters' device and dtype.

    Which optimizers have one on which devices changes between torch releases; one step on a throwaway
    parameter asks this torch directly instead of keeping a table.
    """
    groups = optimizer.param_groups
    if "fused" not in accepted(type(optimizer)) or not groups or not groups[0]["params"]:
        return False
    like = optimizer.param_groups[0]["params"][0]
    if _is_dtensor(like):  # FSDP2-sharded: no fused kernel has a sharding rule
        return False
    probe = torch.zeros(1, device=like.device, dtype=like.dtype, requires_grad=True)
    probe.grad = torch.zeros_like(probe)
    try:
        type(optimizer)([probe], **constructor_kwargs(optimizer, {"fused": True, "foreach": False})).step()
    except (RuntimeError, ValueError, TypeError):
        return False
    return True


def _is_dtensor(tensor: torch.Tensor) -> bool:
    # DTensor is looked up, not imported: importing it costs seconds of start-up, and without it nothing is one
    dtensor = sys.modules.get("torch.distributed.tensor")
    return dtensor is not None and isinstance(tensor, dtensor.DTensor)
