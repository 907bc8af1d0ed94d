"""`ddp`: DistributedDataParallel, a whole model in each process, gradients averaged in buckets."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import torch

from .base import Strategy

if TYPE_CHECKING:
    from .slots import Slots


class DataParallel(Strategy):
    """Wraps the model in DistributedDataParallel after the speed-ups that change layout, kernels and precision,
    before the ones that compile it."""

    name = "ddp"

    def __init__(self) -> None:
        super().__init__()
        self._ddp: torch.nn.Module | None = None

    def setup(self, engine: Slots) -> None:
        ids = [engine.device.index] if engine.device.type == "cuda" else None
        self._ddp = torch.nn.parallel.DistributedDataParallel(engine.model, device_ids=ids)
        engine.replace("model", self._ddp)

    def teardown(self) -> None:
        # the DDP module holds the process group, which must be free to be destroyed when the run ends
        self._ddp = None

    def no_sync(self, module: torch.nn.Module) -> AbstractContextManager:
        return self._ddp.no_sync()
