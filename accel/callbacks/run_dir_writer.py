"""metrics.jsonl, a record at a time, and summary.json when the run ends: a run directory's records."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import AccelError, disk_full
from ..runs.records import FitSummary, Record
from ..runs.rundir import RunDir, cut_metrics
from .base import Callback


class RunDirWriter(Callback):
    """Appends every logged record to metrics.jsonl and writes summary.json when the run ends, however it ends."""

    def __init__(self, run_dir: RunDir):
        self.run_dir = run_dir

    @property
    def metrics(self) -> Path:
        return self.run_dir.metrics

    def on_fit_start(self, trainer) -> None:
        """A resumed run logs again the steps after its checkpoint: what the file holds beyond it goes first."""
        if self.metrics.is_file():
            cut_metrics(self.metrics, trainer.step)

    def on_log(self, trainer, record: Record) -> None:
        # one write of one whole line: a process killed mid-record leaves a cut line, never half of one glued
        # to the next (buffered text I/O may split a long line into several writes)
        line = (record.to_json() + "\n").encode()
        fd = os.open(self.metrics, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        except OSError as err:
            if disk_full(err):
                raise AccelError(
                    f"Disk full: could not append a record to {self.metrics}. Free space in {self.metrics.parent}."
                ) from None
            raise
        finally:
            os.close(fd)

    def on_fit_end(self, trainer, summary: FitSummary) -> None:
        summary.run_dir = str(self.run_dir.path)
        self.run_dir.write_summary(summary)
