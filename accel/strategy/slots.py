"""What a speed-up or a strategy may read of the step machinery it sets up against, and the slots it may replace:
the seams type against this, not against the core (accel.engine.core.Core), which knows them only as parts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn


class Slots(Protocol):
    device: torch.device
    module: nn.Module  # the plain module: weights, checkpoints
    model: Any  # what a forward calls: the slot `replace("model", ...)` fills (compiled, DDP-wrapped)
    optimizer: torch.optim.Optimizer
    forward_loss: Callable[[Any], torch.Tensor]  # forward and loss of one batch: a slot (whole-step compilation)

    def replace(self, slot: str, value: Any) -> None:
        """Put `value` in `slot` (`model`, `forward_loss`, `step_batch`); teardown puts back what was there."""

    def forward_backward(self, batch: Any) -> torch.Tensor:
        """Forward and loss under the step contexts, then the backward of this micro-batch's share."""

    def optimizer_step(self) -> bool:
        """Clip and step through the strategy and its precision; False when the GradScaler skipped the step."""

    def finish_step(self, applied: bool) -> None:
        """The host's part after an optimizer step: clear the gradients, advance a schedule."""
