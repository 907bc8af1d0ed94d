"""The loop's per-batch record, and throughput bookkeeping: a window since the last epoch start, and totals.

Losses stay device tensors until a figure is read, so counting never forces a device sync.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..strategy.world import World


@dataclass
class BatchInfo:
    """One micro-batch, as the loop saw it. `loss` stays a device tensor: reading it would force a sync."""

    loss: torch.Tensor
    samples: int
    data_s: float
    compute_s: float
    optimizer_stepped: bool
    tokens: int | None = None  # for tasks on sequences


class Meter:
    def __init__(self, world: World | None = None):
        self.world = world or World()
        self.samples = self.batches = self.tokens = 0
        self.data_s = self.compute_s = 0.0
        self.first_step_s: float | None = None
        self.window: dict[str, Any] = {}
        self._resumed: dict[str, Any] | None = None  # a checkpoint's unfinished window, continued by the next one

    def start_window(self, device: torch.device) -> None:
        resumed, self._resumed = self._resumed or {}, None
        # throughput counts restart (the time before the interruption is not ours to measure); the loss continues
        self.window = {
            "loss": torch.tensor(resumed.get("loss", 0.0), device=device),
            "batches": resumed.get("batches", 0),
            "samples": 0,
            "tokens": 0,
            "data_s": 0.0,
            "compute_s": 0.0,
        }

    def state_dict(self, mid_epoch: bool) -> dict[str, Any]:
        """This process's loss window when the epoch is unfinished, so a resumed run ends on the same train_loss
        (each process keeps its own window, so this is exact for one process)."""
        if not mid_epoch or not self.window or not self.window["batches"]:
            return {}
        return {"loss": self.window["loss"].item(), "batches": self.window["batches"]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._resumed = dict(state) if state and not self.world.distributed else None

    def add(self, info: BatchInfo) -> None:
        window = self.window
        window["loss"] += info.loss.float()
        window["batches"] += 1
        window["samples"] += info.samples
        window["tokens"] += info.tokens or 0
        self.tokens += info.tokens or 0
        window["data_s"] += info.data_s
        window["compute_s"] += info.compute_s
        self.samples += info.samples
        self.data_s += info.data_s
        self.compute_s += info.compute_s
        if self.first_step_s is None:
            self.first_step_s = info.data_s + info.compute_s

    def window_stats(self) -> dict[str, float]:
        """Mean loss (over every rank), samples/s and the data-wait fraction since the window started."""
        window = self.window
        elapsed = max(window["data_s"] + window["compute_s"], 1e-9)
        loss = self.world.all_reduce_sum(window["loss"] / max(window["batches"], 1)).item() / self.world.size
        return {
            "loss": loss,
            "samples_per_s": window["samples"] / elapsed,
            **({"tokens_per_s": window["tokens"] / elapsed} if window["tokens"] else {}),
            "data_wait_fraction": window["data_s"] / elapsed,
        }

    def totals(self) -> dict[str, Any]:
        train_s = self.data_s + self.compute_s
        return {
            "train_loss": self.window_stats()["loss"] if self.window.get("batches") else None,
            "samples_per_s": self.samples / train_s if train_s else None,
            **({"tokens_per_s": self.tokens / train_s if train_s else None} if self.tokens else {}),
            "train_s": train_s,
            "first_step_s": self.first_step_s,
            "data_wait_fraction": self.data_s / train_s if train_s else None,
        }
