"""A rich progress bar with samples/s on a terminal, and one line per epoch everywhere (with every metric the
task reports)."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ..measure.flops import mfu_percent
from ..runs.records import EpochRecord, FitSummary, Record, StepRecord
from .base import BatchInfo, Callback

LINE_EVERY_S = 30.0  # off a terminal: a step line at most this often, so a log shows progress, not a flood


class ProgressBar(Callback):
    """On a terminal, a bar; elsewhere (a pipe, a log file) a line for the first logged step and then at most one
    every LINE_EVERY_S seconds, so a run shows life before its first epoch ends. `bar=False` keeps only the
    epoch lines."""

    def __init__(self, console: Console | None = None, bar: bool = True):
        self.console = console or Console(stderr=True)
        self.bar = bar and self.console.is_terminal
        self.lines = bar and not self.console.is_terminal
        self._last_line: float | None = None
        self.progress: Progress | None = None
        self.task = None
        self._samples, self._since = 0, time.perf_counter()

    def on_fit_start(self, trainer) -> None:
        if self.bar:
            self.progress = Progress(
                TextColumn("epoch {task.fields[epoch]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:>8.0f} samples/s"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self.progress.start()

    def on_epoch_start(self, trainer, batches: int | None) -> None:
        if self.progress is not None:
            if self.task is not None:
                self.progress.remove_task(self.task)
            self.task = self.progress.add_task(
                "train", total=batches, completed=trainer.batch_in_epoch, epoch=trainer.epoch + 1, rate=0.0
            )
        self._samples, self._since = 0, time.perf_counter()

    def on_batch_end(self, trainer, info: BatchInfo) -> None:
        self._samples += info.samples
        if self.progress is not None:
            rate = self._samples / max(time.perf_counter() - self._since, 1e-9)
            self.progress.update(self.task, advance=1, rate=rate)

    def on_log(self, trainer, record: Record) -> None:
        if not self.lines or not isinstance(record, StepRecord):
            return
        now = time.perf_counter()
        if self._last_line is not None and now - self._last_line < LINE_EVERY_S:
            return
        self._last_line = now
        parts = [f"step {record.step}", f"epoch {record.epoch}", f"loss {record.loss:.4f}"]
        parts.append(f"{record.samples_per_s:.0f} samples/s")
        self.console.print("  ".join(parts), highlight=False, soft_wrap=True)

    def on_epoch_end(self, trainer, record: EpochRecord) -> None:
        parts = [f"epoch {record.epoch}", f"train_loss {record.train_loss:.4f}"]
        parts += [f"{k} {value:.4f}" for k, value in record.metrics.items()]  # the task's metrics
        parts.append(f"{record.samples_per_s:.0f} samples/s")
        if record.tokens_per_s is not None:
            parts.append(f"{record.tokens_per_s:.0f} tokens/s")
        if record.flop_per_s:
            mfu = f" (MFU {mfu_percent(record.mfu)})" if record.mfu is not None else ""
            parts.append(f"{record.flop_per_s / 1e9:.1f} GFLOP/s{mfu}")
        parts.append(f"data wait {100 * record.data_wait_fraction:.0f}%")
        self.console.print("  ".join(parts), highlight=False, soft_wrap=True)

    def on_fit_end(self, trainer, summary: FitSummary) -> None:
        if self.progress is not None:
            self.progress.stop()
