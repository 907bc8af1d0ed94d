"""`optim`: run the optimizer's fused or foreach (multi-tensor) implementation instead of a per-parameter loop."""

from __future__ import annotations

import inspect
import logging
import sys
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field

from ..errors import AccelError
from ..registry import SPEEDUPS
from .base import Candidate, Context, Phase, Speedup, SpeedupConfig

if TYPE_CHECKING:
    from ..engine.core import Engine

log = logging.getLogger("accel")
Impl = Literal["auto", "fused", "foreach", "for_loop"]
# Set by torch's constructors, read by GradScaler: a fused optimizer unscales inside its own kernel.
CONSTRUCTOR_ATTRS = ("_step_supports_amp_scaling", "_need_device_dtype_check_for_fused")


def _accepted(cls: type) -> set[str]:
    return set(inspect.signature(cls.__init__).parameters)


def implementation_flags(cls: type, impl: str) -> dict[str, bool]:
    """The constructor flags of optimizer class `cls` that select `impl` (only those `cls` accepts)."""
    wanted = {"fused": impl == "fused", "foreach": impl == "foreach"}
    accepted = _accepted(cls)
    if any(on and flag not in accepted for flag, on in wanted.items()):
        raise AccelError(
            f"speed-up `optim`: {cls.__name__} has no `{impl}` implementation in torch "
            f"{torch.__version__}. Use `impl: auto`, or an optimizer that has one (adamw, sgd)."
        )
    return {flag: on for flag, on in wanted.items() if flag in accepted}


def _constructor_kwargs(optimizer: torch.optim.Optimizer, flags: dict[str, bool]) -> dict[str, Any]:
    accepted = _accepted(type(optimizer))
    return {k: v for k, v in {**optimizer.defaults, **flags}.items() if k in accepted}


def fused_works(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer`'s class has a fused kernel for its parameters' device and dtype.

    Which optimizers have one on which devices changes between torch releases; one step on a throwaway
    parameter asks this torch directly instead of keeping a table.
    """
    if "fused" not in _accepted(type(optimizer)):
        return False
    like = optimizer.param_groups[0]["params"][0]
    if _is_dtensor(like):  # FSDP2-sharded: no fused kernel has a sharding rule
        return False
    probe = torch.zeros(1, device=like.device, dtype=like.dtype, requires_grad=True)
    probe.grad = torch.zeros_like(probe)
    try:
        type(optimizer)([probe], **_constructor_kwargs(optimizer, {"fused": True, "foreach": False})).step()
    except (RuntimeError, ValueError, TypeError):
        return False
    return True


def _is_dtensor(tensor: torch.Tensor) -> bool:
    # DTensor is looked up, not imported: importing it costs seconds of start-up, and without it nothing is one
    dtensor = sys.modules.get("torch.distributed.tensor")
    return dtensor is not None and isinstance(tensor, dtensor.DTensor)


def choose_impl(optimizer: torch.optim.Optimizer, impl: str) -> str | None:
    """`impl`, or for `auto`: fused where it works, else None (keep torch's default: foreach on CUDA)."""
    if impl != "auto":
        return impl
    return "fused" if fused_works(optimizer) else None


def set_implementation(optimizer: torch.optim.Optimizer, impl: str) -> None:
    """Switch `optimizer` to `impl` in place.

    In place, not rebuilt: the scheduler, GradScaler and any resumed optimizer state keep referring to this
    very object and its param_groups. A throwaway optimizer built with the same groups validates the
    combination (torch raises for fused + differentiable, say) and carries the attributes its constructor sets.
    """
    flags = implementation_flags(type(optimizer), impl)
    if impl == "fused" and not fused_works(optimizer):
        device = optimizer.param_groups[0]["params"][0].device
        raise AccelError(
            f"speed-up `optim`: {type(optimizer).__name__} has no fused kernel for {device.type} "
            f"parameters in torch {torch.__version__}. Use `impl: auto` (fused only where it works)."
        )
    groups = [{**group, **flags} for group in optimizer.param_groups]
    reference = type(optimizer)(groups, **_constructor_kwargs(optimizer, flags))
    for group in optimizer.param_groups:
        group.update(flags)
    optimizer.defaults.update(flags)
    for attr in CONSTRUCTOR_ATTRS:
        if hasattr(reference, attr):
            setattr(optimizer, attr, getattr(reference, attr))
        elif hasattr(optimizer, attr):
            delattr(optimizer, attr)


@SPEEDUPS.register("optim")
class Optim(Speedup):
    """Fused or foreach (multi-tensor) optimizer kernels instead of one small kernel per parameter."""

    class Config(SpeedupConfig):
        impl: Impl = Field(
            "auto",
            description="auto: fused where this torch has a kernel for the optimizer and device, else "
            "torch's default. fused: one kernel for the whole update (adamw, adam, sgd, ...; CUDA and CPU). "
            "foreach: a few multi-tensor kernels (torch's default on CUDA). for_loop: one op per parameter, the "
            "reference implementation.",
        )

    name = "optim"
    phase = Phase.KERNELS
    tune = (Candidate({"impl": "fused"}), Candidate({"impl": "foreach"}))

    def __init__(self, cfg: Config | None = None):
        super().__init__(cfg)
        self.impl: str | None = None

    def conflict(self, context: Context) -> str | None:
        if context.strategy == "fsdp" and self.cfg.impl == "fused":
            return "torch's fused kernels have no implementation for sharded (DTensor) parameters; use `impl: auto`"
        return None

    def setup(self, engine: "Engine") -> None:
        self.impl = choose_impl(engine.optimizer, self.cfg.impl)
        if self.impl is None:
            log.info(
                "optim: no fused %s for %s here; keeping torch's default implementation",
                type(engine.optimizer).__name__,
                engine.device.type,
            )
            return
        set_implementation(engine.optimizer, self.impl)

    def metrics(self) -> dict[str, Any]:
        return {"impl": self.impl or "default"}
