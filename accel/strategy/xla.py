"""`xla`: TPUs (and XLA:CPU for testing) through torch_xla's loader, optimizer step and graph cuts.

torch_xla is imported only when a step runs, so it stays an optional extra.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch

from .base import Strategy
from .ddp import DataParallel
from .xla_runtime import XlaLoader, compile_stats

if TYPE_CHECKING:
    from .slots import Slots

log = logging.getLogger("accel")


class Xla(Strategy):
    """Optimizer steps through xm.optimizer_step with a graph cut (torch_xla.sync) after each; batches through
    MpDeviceLoader. Several processes also wrap the model in DDP, as on other devices."""

    name = "xla"
    RECOMPILE_WARNING = 2  # new graphs per epoch, after the first, that suggest shapes keep changing

    def __init__(self, device: torch.device, distributed: bool = False) -> None:
        super().__init__()
        self.device = device
        self.data_parallel = DataParallel() if distributed else None
        self._compiles_at_epoch: list[int] = []

    def loaders(self, train: Any, val: Any) -> tuple[Any, Any]:
        return XlaLoader(train, self.device), XlaLoader(val, self.device) if val is not None else None

    def setup(self, engine: Slots) -> None:
        if self.data_parallel is not None:
            self.data_parallel.setup(engine)

    def teardown(self) -> None:
        if self.data_parallel is not None:
            self.data_parallel.teardown()

    def no_sync(self, module: torch.nn.Module) -> AbstractContextManager:
        return super().no_sync(module) if self.data_parallel is None else self.data_parallel.no_sync(module)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        import torch_xla
        import torch_xla.core.xla_model as xm

        xm.optimizer_step(optimizer)  # all-reduces gradients across replicas when there are several
        torch_xla.sync()  # cut the graph here: one compiled program per step, reused every step

    def end_epoch(self) -> None:
        self._compiles_at_epoch.append(compile_stats()["compiles"])
        if len(self._compiles_at_epoch) >= 3:
            new = self._compiles_at_epoch[-1] - self._compiles_at_epoch[-2]
            if new > self.RECOMPILE_WARNING:
                log.warning(
                    "XLA compiled %d new graphs during the last epoch: shapes keep changing. Keep batch "
                    "shapes fixed (data.drop_last: true; pad the evaluation batch).",
                    new,
                )

    def metrics(self) -> dict[str, Any]:
        return compile_stats()
