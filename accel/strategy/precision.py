"""The numeric part of a training step: fp32, bf16 autocast, or fp16 autocast with a GradScaler.

A strategy (accel.strategy) owns backward and the optimizer step and hands their numeric part to its Precision,
so any strategy combines with any precision the strategy does not refuse. The recipe's `speedups.amp` section
builds one (accel.speedups.amp); without it a run trains in fp32.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

log = logging.getLogger("accel")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
Step = Callable[[torch.optim.Optimizer], Any]  # how the strategy applies an optimizer step (xm.optimizer_step)


class Precision:
    """fp32: every hook plain."""

    name = "fp32"
    scales = False  # the loss is scaled, so the gradients need unscaling before they are read (fp16)
    unscaled = False  # this step's gradients are unscaled already (fp16: before the loop clips them)

    def setup(self, device: torch.device) -> None:
        """Build what needs the device (a GradScaler), once: a second fit() keeps it."""

    def forward_context(self) -> AbstractContextManager:
        return nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """The true gradients in place before clipping (a hand-written loop clips before `optimizer.step()`)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer, clip: Callable[[], None], step: Step) -> bool:
        """Clip and step; False when the step was skipped (inf gradients)."""
        clip()
        step(optimizer)
        return True

    def metrics(self) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class Autocast(Precision):
    """Forward and loss under autocast: matmuls and convolutions in `dtype`, reductions in fp32."""

    def __init__(self, dtype: str):
        self.name, self.device_type = dtype, "cpu"

    def setup(self, device: torch.device) -> None:
        self.device_type = device.type

    def forward_context(self) -> AbstractContextManager:
        return torch.autocast(self.device_type, dtype=DTYPES[self.name])


def make_scaler(device: torch.device, init_scale: float, growth_interval: int) -> torch.amp.GradScaler:
    """A GradScaler for fp16: without one, small fp16 gradients underflow to zero."""
    return torch.amp.GradScaler(device.type, init_scale=init_scale, growth_interval=growth_interval)


class ScaledFp16(Autocast):
    """fp16 autocast with a GradScaler: the loss is scaled before backward and the gradients unscaled before
    clipping; a step with inf/NaN gradients is skipped and the scale lowered."""

    scales = True

    def __init__(self, init_scale: float, growth_interval: int):
        super().__init__("fp16")
        self.init_scale, self.growth_interval = init_scale, growth_interval
        self.scaler: torch.amp.GradScaler | None = None
        self.skipped_steps = 0
        self.unscaled = False

    def setup(self, device: torch.device) -> None:
        super().setup(device)
        if self.scaler is None:
            self.scaler = make_scaler(device, self.init_scale, self.growth_interval)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        if not self.unscaled:  # the scaler refuses a second unscale_ before update()
            self.scaler.unscale_(optimizer)
            self.unscaled = True

    def optimizer_step(self, optimizer: torch.optim.Optimizer, clip: Callable[[], None], step: Step) -> bool:
        """Unscale, clip, step and update the scale. Clipping must see the true gradients, so unscale comes first;
        the scaler remembers it and does not divide again. Called only on real optimizer steps, so under
        gradient accumulation the scale updates once per step. `scaler.step` steps the optimizer itself: the
        strategy's `step` cannot be used (why the XLA strategy refuses fp16)."""
        self.unscale(optimizer)
        clip()
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)  # skips optimizer.step() itself when it found inf/NaN
        self.scaler.update()
        self.unscaled = False
        # update() lowers the scale exactly when inf/NaN gradients were found, i.e. when the step was skipped
        applied = self.scaler.get_scale() >= before
        if not applied:
            self.skipped_steps += 1
            log.info(
                "amp: optimizer step skipped (inf/NaN gradients in fp16); loss scale lowered to %g (%d skipped so far)",
                self.scaler.get_scale(),
                self.skipped_steps,
            )
        return applied

    def metrics(self) -> dict[str, Any]:
        if self.scaler is None:
            return {}
        return {"skipped_steps": self.skipped_steps, "loss_scale": self.scaler.get_scale()}

    def state_dict(self) -> dict[str, Any]:
        if self.scaler is None:
            return {}
        return {"scaler": self.scaler.state_dict(), "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.scaler.load_state_dict(state["scaler"])
            self.skipped_steps = state["skipped_steps"]
