"""torch_xla's loader and compile counters, for the XLA strategy (accel.strategy.xla).

torch_xla is imported inside the functions, so it stays an optional extra.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


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
