"""The callback hooks. Each does nothing by default; a callback overrides the ones it needs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..measure.meter import BatchInfo
from ..runs.records import EpochRecord, FitSummary, Record

if TYPE_CHECKING:
    from ..train.trainer import Trainer


class Callback:
    state_name = ""  # the key of its state in a checkpoint: a stable name (default: the class name)
    saves_checkpoints = False  # a stop by a signal ends with a checkpoint this callback writes

    def on_fit_start(self, trainer: "Trainer") -> None: ...

    def on_epoch_start(self, trainer: "Trainer", batches: int | None) -> None: ...

    def on_batch_end(self, trainer: "Trainer", info: BatchInfo) -> None: ...

    def on_log(self, trainer: "Trainer", record: Record) -> None:
        """Every record also written to metrics.jsonl (accel.runs.records): a step, epoch or eval record."""

    def on_epoch_end(self, trainer: "Trainer", record: EpochRecord) -> None: ...

    def on_fit_end(self, trainer: "Trainer", summary: FitSummary) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
