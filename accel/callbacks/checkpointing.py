"""Saves the trainer's full state every N epochs and when a run ends or is interrupted.

Without a run directory it writes nothing but still takes part in gathering a sharded model's state."""

from __future__ import annotations

import logging
from typing import Any

import torch

from ..checkpoint import save_checkpoint
from ..rundir import RunDir, epoch_checkpoints
from .base import Callback

log = logging.getLogger("accel")


class Checkpointer(Callback):
    def __init__(self, run_dir: RunDir | None, every_epochs: int = 1, keep: int = 2):
        self.run_dir, self.every_epochs, self.keep = run_dir, every_epochs, keep

    def save(self, trainer) -> dict[str, Any] | None:
        """Write last.pt, unless the weights are no longer finite: the last finite checkpoint is worth keeping."""
        state = trainer.state_dict()
        if self.run_dir is None:
            return state
        if not all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point()):
            log.warning("not saving a checkpoint at step %d: the weights hold NaN or infinity", trainer.step)
            return None
        save_checkpoint(state, self.run_dir.last_checkpoint)
        return state

    def on_epoch_end(self, trainer, record: dict[str, Any]) -> None:
        if not self.every_epochs or trainer.epoch % self.every_epochs:
            return
        state = self.save(trainer)
        if state is not None and self.keep and self.run_dir is not None:
            save_checkpoint(state, self.run_dir.epoch_checkpoint(trainer.epoch))
            for old in epoch_checkpoints(self.run_dir.checkpoints)[: -self.keep]:
                old.unlink()

    def on_fit_end(self, trainer, summary: dict[str, Any]) -> None:
        if summary["status"] in {"completed", "interrupted", "preempted"}:
            self.save(trainer)
