"""Saves the trainer's full state every N epochs, N steps or N minutes, and when a run ends or is interrupted.

Without a run directory it writes nothing but still takes part in gathering a sharded model's state."""

from __future__ import annotations

import logging
from time import monotonic
from typing import Any

import torch
from pydantic import Field

from ..measure.meter import BatchInfo
from ..runs.checkpoint import finite_weights, save_checkpoint
from ..runs.records import EpochRecord, FitSummary
from ..runs.rundir import RunDir, epoch_checkpoints
from ..runs.sharded_checkpoint import ShardedSaver
from ..schema import StrictModel
from .base import Callback

log = logging.getLogger("accel")


class CheckpointConfig(StrictModel):
    every_epochs: int = Field(
        1, ge=0, description="save checkpoints/last.pt every N epochs (0: only at the end and on interrupt)"
    )
    keep: int = Field(2, ge=0, description="also keep the newest N per-epoch files epoch-NNN.pt")
    every_steps: int = Field(
        0,
        ge=0,
        description="also save checkpoints/last.pt every N optimizer steps, mid-epoch included, so a restart or a "
        "crash loses at most N steps (0: off)",
    )
    every_minutes: float = Field(
        0,
        ge=0,
        description="also save checkpoints/last.pt when this many minutes have passed since the last save, checked "
        "every log.every_steps steps (0: off)",
    )
    sharded: bool = Field(
        True,
        description="with strategy fsdp over several processes, each writes its own shards into the folder "
        "checkpoints/last (torch.distributed.checkpoint, in the background) instead of gathering the whole model "
        "into last.pt on rank 0 (false); a sharded checkpoint keeps no epoch-NNN copies. DDP and one process "
        "always write whole last.pt",
    )
    background: bool = Field(
        True,
        description="write sharded checkpoints in a background thread (torch.distributed.checkpoint.async_save): "
        "training waits only while the state is copied in memory. That copy can take longer than a synchronous "
        "write to a fast local disk (benchmarks/dcp_async_save.py); false writes synchronously",
    )


class Checkpointer(Callback):
    """`gathered`: every rank runs this callback (a sharded model's state is gathered from all of them, or each
    rank writes its shards through `sharded`), so every rank must decide alike when to save."""

    saves_checkpoints = True

    def __init__(
        self,
        run_dir: RunDir | None,
        config: CheckpointConfig | None = None,
        gathered: bool = False,
        sharded: ShardedSaver | None = None,
    ):
        self.run_dir, self.cfg, self.gathered, self.sharded = run_dir, config or CheckpointConfig(), gathered, sharded
        self._saved_at = monotonic()
        self._batches: int | None = None  # the current epoch's batch count

    def save(self, trainer) -> dict[str, Any] | None:
        """Write last.pt, unless the weights are no longer finite: the last finite checkpoint is worth keeping."""
        if self.sharded is not None:
            self._save_sharded(trainer)
            return None
        state = trainer.state_dict()
        self._saved_at = monotonic()
        if self.run_dir is None:
            return state
        if not all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point()):
            log.warning("not saving a checkpoint at step %d: the weights hold NaN or infinity", trainer.step)
            return None
        save_checkpoint(state, self.run_dir.last_checkpoint)
        return state

    def _save_sharded(self, trainer) -> None:
        self._saved_at = monotonic()
        if trainer.world.any(not finite_weights(trainer.module), trainer.device):  # a shard anywhere: all skip
            log.warning("not saving a checkpoint at step %d: the weights hold NaN or infinity", trainer.step)
            return
        self.sharded.save(trainer, trainer.training_state())

    def on_epoch_start(self, trainer, batches: int | None) -> None:
        self._batches = batches

    def on_batch_end(self, trainer, info: BatchInfo) -> None:
        # the epoch's last batch is the epoch's checkpoint (or none): a mid-epoch one there would resume past the end
        if info.optimizer_stepped and trainer.batch_in_epoch != self._batches and self._due(trainer):
            self.save(trainer)

    def _due(self, trainer) -> bool:
        if self.cfg.every_steps and trainer.step % self.cfg.every_steps == 0:
            return True
        if not self.cfg.every_minutes or trainer.step % trainer.log_every_steps:
            return False
        late = monotonic() - self._saved_at >= self.cfg.every_minutes * 60
        # clocks differ between ranks: those that gather agree, at a step where they already meet (stopping)
        return trainer.world.any(late, trainer.device) if self.gathered else late

    def on_epoch_end(self, trainer, record: EpochRecord) -> None:
        every = self.cfg.every_epochs
        if not every or trainer.epoch % every:
            return
        state = self.save(trainer)
        keep = self.cfg.keep
        if state is not None and keep and self.run_dir is not None:
            save_checkpoint(state, self.run_dir.epoch_checkpoint(trainer.epoch))
            for old in epoch_checkpoints(self.run_dir.checkpoints)[:-keep]:
                old.unlink()

    def on_fit_end(self, trainer, summary: FitSummary) -> None:
        if summary.status in {"completed", "interrupted", "preempted"}:
            self.save(trainer)
        if self.sharded is not None:  # the last save is on disk before the run reports its end
            self.sharded.close()
