"""The XLA path (TPUs, and XLA:CPU for testing): torch_xla's own loader, optimizer step and graph cuts.

Imported only when the device is `xla`, so torch_xla stays an optional extra.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import torch

from .speedups.base import Speedup

log = logging.getLogger("accel")


class XlaLoader:
    """A DataLoader fed through torch_xla's MpDeviceLoader, which uploads batches in a background thread.

    It keeps the wrapped loader's `sampler`, `batch_size` and length, so the trainer can still set the
    epoch, resume mid-epoch and count batches.
    """

    def __init__(self, loader: Any, device: torch.device):
        from torch_xla.distributed.parallel_loader import MpDeviceLoader

        self.loader, self.device = loader, device
        self.sampler, self.batch_size = loader.sampler, loader.batch_size
        self._device_loader = MpDeviceLoader(loader, device)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._device_loader)

    def __len__(self) -> int:
        return len(self.loader)


def compile_stats() -> dict[str, float]:
    """XLA graph compilations so far and their total seconds, from torch_xla's metrics."""
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    count, total_ns = (data[0], data[1]) if data else (0, 0)
    return {"compiles": int(count), "compile_s": total_ns / 1e9}


class XlaStep(Speedup):
    """Optimizer steps through xm.optimizer_step, a graph cut (torch_xla.sync) after each step."""

    name = "xla"
    order = 5
    owns_step = True
    RECOMPILE_WARNING = 2  # new graphs per epoch, after the first, that suggest shapes keep changing

    def __init__(self) -> None:
        super().__init__()
        self._compiles_at_epoch: list[int] = []

    def optimizer_step(self, trainer: Any) -> bool:
        import torch_xla
        import torch_xla.core.xla_model as xm

        trainer.clip_gradients()
        xm.optimizer_step(trainer.optimizer)  # all-reduces gradients across replicas when there are several
        torch_xla.sync()  # cut the graph here: one compiled program per step, reused every step
        return True

    def metrics(self) -> dict[str, Any]:
        stats = compile_stats()
        self._compiles_at_epoch.append(stats["compiles"])
        if len(self._compiles_at_epoch) >= 3:
            new = self._compiles_at_epoch[-1] - self._compiles_at_epoch[-2]
            if new > self.RECOMPILE_WARNING:
                log.warning("XLA compiled %d new graphs during the last epoch: shapes keep changing. Keep batch "
                            "shapes fixed (data.drop_last: true; pad the evaluation batch).", new)
        return stats
