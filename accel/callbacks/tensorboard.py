"""Writes every logged record as TensorBoard scalars under the run's tb/ folder."""

from __future__ import annotations

from pathlib import Path

from ..runs.records import FitSummary, Record
from .base import Callback


class TensorBoard(Callback):
    def __init__(self, log_dir: Path):
        self.log_dir, self.writer = log_dir, None

    def on_fit_start(self, trainer) -> None:
        # not at construction: a run refused before training (a resume that does not fit) leaves no event file
        from torch.utils.tensorboard import SummaryWriter  # imported here: tensorboard is slow to import

        self.writer = SummaryWriter(log_dir=str(self.log_dir))

    def on_log(self, trainer, record: Record) -> None:
        if self.writer is None:
            return
        prefix = {"step": "train", "": "log"}.get(record.kind, record.kind)  # train/, epoch/, eval/, log/ (own loop)
        for key, value in record.model_dump().items():  # as metrics.jsonl names them
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in {"step", "epoch"}:
                self.writer.add_scalar(f"{prefix}/{key}", value, record.step)

    def on_fit_end(self, trainer, summary: FitSummary | None) -> None:
        if self.writer is not None:
            self.writer.close()
