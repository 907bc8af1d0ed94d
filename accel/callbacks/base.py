"""The callback hooks. Each does nothing by default; a callback overrides the ones it needs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ..trainer import Trainer


@dataclass
class BatchInfo:
    """One micro-batch, as the loop saw it. `loss` stays a device tensor: reading it would force a sync."""

    loss: torch.Tensor
    samples: int
    data_s: float
    compute_s: float
    optimizer_stepped: bool


class Callback:
    def on_fit_start(self, trainer: "Trainer") -> None: ...

    def on_epoch_start(self, trainer: "Trainer", batches: int | None) -> None: ...

    def on_batch_end(self, trainer: "Trainer", info: BatchInfo) -> None: ...

    def on_log(self, trainer: "Trainer", record: dict[str, Any]) -> None:
        """Every record also written to metrics.jsonl: kind 'step' or 'epoch'."""

    def on_epoch_end(self, trainer: "Trainer", record: dict[str, Any]) -> None: ...

    def on_fit_end(self, trainer: "Trainer", summary: dict[str, Any]) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
