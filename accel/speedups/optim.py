"""`optim`: run the optimizer's fused or foreach (multi-tensor) implementation instead of a per-parameter loop."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field

from ..errors import AccelError
from ..optimizers.traits import OptimizerTraits, accepted, constructor_kwargs, fused_works, optimizer_traits
from .base import Candidate, Context, Phase, Speedup, SpeedupConfig, registered

if TYPE_CHECKING:
    from ..strategy.slots import Slots

log = logging.getLogger("accel")
Impl = Literal["auto", "fused", "foreach", "for_loop"]
# Set by torch's constructors, read by GradScaler: a fused optimizer unscales inside its own kernel.
CONSTRUCTOR_ATTRS = ("_step_supports_amp_scaling", "_need_device_dtype_check_for_fused")


def unavailable(optimizer: OptimizerTraits, impl: str) -> str | None:
    """Why `optimizer` cannot run `impl` here, or None (a fused kernel not known to work is not refused)."""
    if impl == "fused" and optimizer.fused is False:
        return (
            f"{optimizer.name} has no fused kernel for its parameters here (torch {torch.__version__}); use "
            "`impl: auto` (fused only where it works) or an optimizer that has one (adamw, sgd)"
        )
    if impl == "foreach" and not optimizer.foreach:
        return f"{optimizer.name} has no foreach implementation in torch {torch.__version__}; use `impl: auto`"
    return None


def implementation_flags(cls: type, impl: str) -> dict[str, bool]:
    """The constructor flags of optimizer class `cls` that select `impl` (only those `cls` accepts)."""
    wanted = {"fused": impl == "fused", "foreach": impl == "foreach"}
    taken = accepted(cls)
    return {flag: on for flag, on in wanted.items() if flag in taken}


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
    A run never gets here with an `impl` the optimizer lacks: the conflict rule refused it before setup.
    """
    reason = unavailable(optimizer_traits(optimizer), impl)
    if reason is not None:
        raise AccelError(f"speed-up `optim`: {reason}.")
    flags = implementation_flags(type(optimizer), impl)
    groups = [{**group, **flags} for group in optimizer.param_groups]
    reference = type(optimizer)(groups, **constructor_kwargs(optimizer, flags))
    for group in optimizer.param_groups:
        group.update(flags)
    optimizer.defaults.update(flags)
    for attr in CONSTRUCTOR_ATTRS:
        if hasattr(reference, attr):
            setattr(optimizer, attr, getattr(reference, attr))
        elif hasattr(optimizer, attr):
            delattr(optimizer, attr)


@registered("optim")
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

    phase = Phase.KERNELS
    tune = (Candidate({"impl": "fused"}), Candidate({"impl": "foreach"}))

    def __init__(self, cfg: Config | None = None):
        super().__init__(cfg)
        self.impl: str | None = None

    def conflict(self, context: Context) -> str | None:
        if context.strategy == "fsdp" and self.cfg.impl == "fused":
            return "torch's fused kernels have no implementation for sharded (DTensor) parameters; use `impl: auto`"
        optimizer = context.run.optimizer
        return unavailable(optimizer, self.cfg.impl) if optimizer is not None else None

    def optimizer_impl(self) -> str | None:
        return self.cfg.impl if self.cfg.impl != "auto" else None

    def setup(self, engine: "Slots") -> None:
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
