"""`float8`: train the large linear layers with float8 matmuls through torchao (CUDA GPUs with FP8)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field
from torch import nn

from ..extras import unavailable
from .base import Candidate, Context, Phase, Speedup, SpeedupConfig, registered

if TYPE_CHECKING:
    from ..strategy.slots import Slots

log = logging.getLogger("accel")
FP8_CAPABILITY = (8, 9)  # Ada and Hopper onwards have FP8 tensor cores


def eligible(module: nn.Module, fqn: str, min_features: int, skip: list[str]) -> bool:
    """Whether the linear layer `fqn` gains from float8: both dimensions at least `min_features` (below that
    the casts and scales cost more than the faster matmul saves) and multiples of 16 (the FP8 GEMM's tiles),
    and not named in `skip`."""
    if not isinstance(module, nn.Linear) or any(part in fqn for part in skip):
        return False
    dims = (module.in_features, module.out_features)
    return min(dims) >= min_features and all(d % 16 == 0 for d in dims)


@registered("float8")
class Float8(Speedup):
    """Float8 matmuls for the large linear layers via torchao (CUDA, compute capability 8.9+); the run says which."""

    class Config(SpeedupConfig):
        recipe: Literal["tensorwise", "rowwise", "rowwise_with_gw_hp"] = Field(
            "tensorwise",
            description="torchao's scaling recipe: one scale per tensor (fastest), per row (more "
            "accurate), or per row with the weight gradient in high precision",
        )
        min_features: int = Field(
            1024,
            ge=16,
            description="convert only linear layers whose in and out features "
            "are both at least this (smaller matmuls lose more to casting than they gain)",
        )
        skip: list[str] = Field(
            ["lm_head", "head"],
            description="layers whose name contains one of these stay in "
            "high precision (the output head is the usual one)",
        )

    phase = Phase.MODEL  # after the layout and optimizer set-up, before compile traces the converted layers
    tune = (Candidate(),)

    def __init__(self, cfg: Config | None = None):
        super().__init__(cfg)
        self.converted: list[str] = []

    def conflict(self, context: Context) -> str | None:
        device = context.device
        if device.type != "cuda":
            return f"float8 matmuls need a CUDA GPU with FP8 (compute capability 8.9+); device here: {device.type}"
        capability = torch.cuda.get_device_capability(device)
        if capability < FP8_CAPABILITY:
            return (
                f"{torch.cuda.get_device_name(device)} has compute capability {capability[0]}.{capability[1]}; "
                "float8 matmuls need 8.9+ (Ada, Hopper, Blackwell)"
            )
        return unavailable("float8", "torchao")

    def setup(self, engine: "Slots") -> None:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        def keep(module: nn.Module, fqn: str) -> bool:
            chosen = eligible(module, fqn, self.cfg.min_features, self.cfg.skip)
            if chosen:
                self.converted.append(fqn)
            return chosen

        self.converted = []
        convert_to_float8_training(
            engine.module, module_filter_fn=keep, config=Float8LinearConfig.from_recipe_name(self.cfg.recipe)
        )
        if self.converted:
            log.info("float8: %d linear layer(s) converted: %s", len(self.converted), ", ".join(self.converted))
        else:
            log.warning(
                "float8: no linear layer has both dimensions >= %d (multiples of 16) outside %s: nothing "
                "converted. Lower speedups.float8.min_features, or drop float8 for this model.",
                self.cfg.min_features,
                self.cfg.skip,
            )

    def metrics(self) -> dict[str, Any]:
        return {"converted_layers": len(self.converted)}
