"""`amp`: mixed precision. bf16 autocast anywhere it is supported; fp16 autocast with a GradScaler on CUDA."""
from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field

from .. import devices
from ..registry import SPEEDUPS
from .base import Speedup, SpeedupConfig

if TYPE_CHECKING:
    from ..trainer import Trainer

log = logging.getLogger("accel")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device, dtype: str) -> AbstractContextManager:
    """The autocast context for forward + loss: matmuls and convolutions run in `dtype`, reductions in fp32."""
    return torch.autocast(device.type, dtype=DTYPES[dtype])


def make_scaler(device: torch.device, init_scale: float, growth_interval: int) -> torch.amp.GradScaler:
    """A GradScaler for fp16: without one, small fp16 gradients underflow to zero."""
    return torch.amp.GradScaler(device.type, init_scale=init_scale, growth_interval=growth_interval)


def scaled_step(scaler: torch.amp.GradScaler, trainer: "Trainer") -> bool:
    """Unscale, clip, step and update the scale; False when the step was skipped for inf/NaN gradients.

    Clipping must see the true gradients, so unscale comes first; the scaler remembers that it unscaled
    and does not divide again in `step`. Called only on real optimizer steps, so under gradient
    accumulation the scale updates once per step, not once per micro-batch.
    """
    scaler.unscale_(trainer.optimizer)
    trainer.clip_gradients()
    before = scaler.get_scale()
    scaler.step(trainer.optimizer)  # skips optimizer.step() itself when it found inf/NaN
    scaler.update()
    # update() lowers the scale exactly when inf/NaN gradients were found, i.e. when the step was skipped
    return scaler.get_scale() >= before


@SPEEDUPS.register("amp")
class Amp(Speedup):
    """Mixed precision: bf16 autocast (CPU and recent GPUs) or fp16 autocast with a GradScaler (CUDA)."""

    class Config(SpeedupConfig):
        dtype: Literal["bf16", "fp16"] = Field(
            "bf16", description="bf16: same range as fp32, no loss scaling needed, runs on CPUs with native bf16 "
            "too (1.7x fp32 for ResNet-18 on an AVX512-BF16 CPU, docs/benchmarks.md). fp16: needs a GradScaler, "
            "which accel supports on CUDA only.")
        init_scale: float = Field(2.0**16, gt=0, description="fp16 only: the GradScaler's starting loss scale.")
        growth_interval: int = Field(
            2000, ge=1, description="fp16 only: steps without inf/NaN gradients before the loss scale doubles.")

    name = "amp"
    order = 40

    def __init__(self, cfg: Config | None = None):
        super().__init__(cfg)
        # Only fp16 replaces backward and the optimizer step (to scale the loss); bf16 leaves them plain.
        self.owns_step = self.cfg.dtype == "fp16"
        self.scaler: torch.amp.GradScaler | None = None
        self.device = torch.device("cpu")
        self.skipped_steps = 0

    def unavailable(self, device: torch.device) -> str | None:
        if self.cfg.dtype == "fp16" and not devices.supports_fp16_scaler(device):
            return (f"fp16 needs a GradScaler, which accel supports on CUDA only (device here: {device.type}); "
                    "use `dtype: bf16`")
        if self.cfg.dtype == "bf16" and not devices.supports_bf16(device):
            if device.type == "cpu":
                return ("this CPU has no native bf16 (AVX512-BF16 or AMX): torch would emulate it, many times "
                        "slower than fp32, so fp32 it is")
            return f"bf16 autocast is not supported on {devices.device_name(device)}; use `dtype: fp16` on CUDA"
        return None

    def sharding_conflict(self) -> str | None:
        if self.cfg.dtype == "fp16":
            return "the GradScaler has not been verified on sharded gradients here; use `dtype: bf16`"
        return None

    def setup(self, trainer: "Trainer") -> None:
        self.device = trainer.device
        if self.owns_step and self.scaler is None:  # a second fit() keeps the scaler it has
            self.scaler = make_scaler(self.device, self.cfg.init_scale, self.cfg.growth_interval)

    def step_context(self) -> AbstractContextManager:
        return autocast(self.device, self.cfg.dtype)

    def backward(self, loss: torch.Tensor, trainer: "Trainer") -> None:
        self.scaler.scale(loss).backward()

    def optimizer_step(self, trainer: "Trainer") -> bool:
        applied = scaled_step(self.scaler, trainer)
        if not applied:
            self.skipped_steps += 1
            log.info("amp: optimizer step skipped (inf/NaN gradients in fp16); loss scale lowered to %g "
                     "(%d skipped so far)", self.scaler.get_scale(), self.skipped_steps)
        return applied

    def metrics(self) -> dict[str, Any]:
        if self.scaler is None:
            return {}
        return {"skipped_steps": self.skipped_steps, "loss_scale": self.scaler.get_scale()}

    def state_dict(self) -> dict[str, Any]:
        if not self.owns_step or self.scaler is None:
            return {}
        return {"scaler": self.scaler.state_dict(), "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state or not self.owns_step:
            return
        self.scaler.load_state_dict(state["scaler"])
        self.skipped_steps = state["skipped_steps"]
