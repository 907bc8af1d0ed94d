"""`channels_last`: NHWC memory format for the model and every input batch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from .base import Candidate, Context, Phase, Speedup, SpeedupConfig, registered

if TYPE_CHECKING:
    from ..strategy.slots import Slots

# By tensor rank: images (N, C, H, W) and volumes (N, C, D, H, W). Other ranks have no channels-last layout.
FORMATS = {4: torch.channels_last, 5: torch.channels_last_3d}


def to_channels_last(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` in the channels-last layout of its rank; tensors of other ranks unchanged."""
    layout = FORMATS.get(tensor.dim())
    return tensor if layout is None else tensor.contiguous(memory_format=layout)


def apply_channels_last(model: nn.Module) -> nn.Module:
    """Convert `model`'s 4-D and 5-D weights and buffers to channels-last, in place.

    `model.to(memory_format=channels_last)` refuses 5-D (Conv3d) weights, so each tensor gets the layout of
    its own rank. Like Module.to, `_apply` swaps each parameter's data and keeps the Parameter object, so an
    optimizer built before still trains the same tensors.
    """
    return model._apply(to_channels_last)


@registered("channels_last")
class ChannelsLast(Speedup):
    """Channels-last (NHWC) memory format for model and batches: faster convolutions on GPUs and CPUs."""

    class Config(SpeedupConfig):
        pass

    phase = Phase.LAYOUT  # memory layout before anything that traces the model (compile, jit)
    needs = "has_conv"
    tune = (Candidate(),)

    def conflict(self, context: Context) -> str | None:
        if context.strategy == "fsdp":
            return "FSDP2 gathers each parameter into a contiguous buffer, so weights cannot stay channels-last"
        return None

    def setup(self, engine: "Slots") -> None:
        apply_channels_last(engine.module)

    def prepare_batch(self, inputs: torch.Tensor) -> torch.Tensor:
        # A channels-last model fed NCHW input converts at its first convolution; converting here does it once,
        # after any augmentation, and keeps the whole forward in one layout.
        return to_channels_last(inputs)
