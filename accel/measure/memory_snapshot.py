"""CUDA memory snapshots: a pickle of the caching allocator's state (and, while history is recorded, of each
allocation with its stack) that the PyTorch memory viewer opens (https://pytorch.org/memory_viz).

Uses torch.cuda.memory's `_record_memory_history` and `_dump_snapshot`: private names, but the ones torch's own
documentation ("Understanding CUDA Memory Usage") tells users to call."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from ..errors import AccelError

log = logging.getLogger("accel")
VIEWER = "https://pytorch.org/memory_viz"
HISTORY_ENTRIES = 100_000  # a few profiled steps' allocations; each entry is a few KB with its stack


def record_history(on: bool) -> None:
    """Start (with stacks) or stop recording each allocation and free, for the next snapshot."""
    if on:
        torch.cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES)
    else:
        torch.cuda.memory._record_memory_history(enabled=None)


def dump(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.cuda.memory._dump_snapshot(str(path))
    return path


@contextmanager
def dump_on_oom(device: torch.device, path: Path) -> Iterator[None]:
    """On CUDA, a run that ends in out-of-memory leaves a snapshot of the allocator at that moment at `path`
    (the tensors still held by the failing frames included) and says where it is; elsewhere nothing changes."""
    if device.type != "cuda":
        yield
        return
    try:
        yield
    except torch.cuda.OutOfMemoryError as err:
        dump(path)
        raise AccelError(
            f"CUDA out of memory: {str(err).splitlines()[0]}\nThe allocator's state at that moment is in {path}; "
            f"open it in {VIEWER}. To fit: a smaller data.batch_size, speedups.activation_checkpointing, "
            "speedups.amp, or for a language model task.fused_loss: true."
        ) from err
