"""`ddp`: DistributedDataParallel, a whole model in each process, gradients averaged in buckets."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import torch

from .base import Strategy

if TYPE_CHECKING:
    from ..trainer import Trainer


class DataParallel(Strategy):
    """Wraps the model in DistributedDataParallel after the speed-ups that change layout, kernels and precision,
    before the ones that compile it."""

    name = "ddp"

    def __init__(self) -> None:
        super().__init__()
        self._wrapped: tuple[Trainer, torch.nn.Module] | None = None  # (the trainer, its model before)
        self._ddp: torch.nn.Module | None = None

    def setup(self, trainer: Trainer) -> None:
        ids = [trainer.device.index] if trainer.device.type == "cuda" else None
        self._ddp = torch.nn.parallel.DistributedDataParallel(trainer.model, device_ids=ids)
        self._wrapped, trainer.model = (trainer, trainer.model), self._ddp

    def teardown(self) -> None:
        # the DDP module holds the process group, which must be free to be destroyed when the run ends
        if self._wrapped is not None:
            trainer, model = self._wrapped
            trainer.model, self._wrapped, self._ddp = model, None, None

    def no_sync(self, trainer: Trainer) -> AbstractContextManager:
        return self._ddp.no_sync()
