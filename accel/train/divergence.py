"""A diverged run: a loss that became NaN or infinite, noticed in the logged records and, once more at the end,
in the losses and weights no record has read. Every rank reaches the same verdict."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..runs.checkpoint import finite_weights
from ..runs.records import EpochRecord, EvalRecord, StepRecord

if TYPE_CHECKING:
    from .trainer import Trainer


def notice(trainer: Trainer, record: StepRecord | EvalRecord | EpochRecord) -> None:
    """Every logged record passes here: the one place a diverged loss is noticed, with no extra device sync
    (the window's loss is read for the record anyway). Every rank sees the same all-reduced loss."""
    if isinstance(record, EvalRecord):
        return
    loss = record.loss if isinstance(record, StepRecord) else record.train_loss
    if loss is not None and not math.isfinite(loss) and trainer.diverged_at is None:
        trainer.diverged_at, trainer.should_stop = trainer.step, True


def check_at_end(trainer: Trainer) -> None:
    """A run that stops between logging intervals has a window of losses no record read, and a last optimizer
    step whose weights no loss has seen yet: read both once, so such a run is never reported "completed"."""
    if trainer.diverged_at is not None:
        return
    # every rank reads its window (a collective), even one without batches in it
    loss_ok = not trainer.meter.window or math.isfinite(trainer.meter.window_stats()["loss"])
    # every rank must agree on the status
    if trainer.world.any(not (loss_ok and finite_weights(trainer.module)), trainer.device):
        trainer.diverged_at = trainer.step
