"""uint8 -> float conversion and normalisation, done on the device where it is cheap."""

from __future__ import annotations

from collections.abc import Sequence

import torch


class Normalize:
    """`(x / 255 - mean) / std` per channel for uint8 batches; float batches pass through unchanged."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        self._scale = self._shift = None

    def __call__(self, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if inputs.dtype != torch.uint8:
            return inputs, targets
        if self._scale is None or self._scale.device != inputs.device:
            # one fused multiply-add: x * (1 / (255 std)) - mean / std
            self._scale = (1.0 / (255.0 * self.std)).to(inputs.device)
            self._shift = (-self.mean / self.std).to(inputs.device)
        return torch.addcmul(self._shift, inputs.float(), self._scale), targets
