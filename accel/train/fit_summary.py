"""What a fit reports when it ends (summary.json): status, metrics, throughput, utilisation, what ran."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .. import devices
from ..measure.load import busy_run_note
from ..runs.records import FitSummary

if TYPE_CHECKING:
    from .trainer import Trainer


log = logging.getLogger("accel")


def fit_summary(trainer: Trainer, status: str, wall_s: float, machine: dict[str, Any] | None) -> FitSummary:
    """summary.json's figures; `machine`: others' load while it trained (accel/measure/load.py), said if busy."""
    totals = trainer.meter.totals()
    utilisation = trainer.utilisation
    usage = {"flop_per_s": None, "mfu": None} | utilisation.stats(totals["samples_per_s"])
    per_batch, peak = utilisation.flops_per_batch, utilisation.peak  # after stats: a CPU's peak a run passed is raised
    summary = FitSummary(
        status=status,
        metrics={
            "val_accuracy": None,
            "val_loss": None,
            **trainer.last_eval,  # the task's metric names
            "train_loss": totals.pop("train_loss"),
        },
        **totals,
        wall_s=wall_s,
        startup_s=trainer.startup_s,
        steps=trainer.step,
        epochs=epochs_done(trainer),
        flops_per_step=per_batch * trainer.cfg.grad_accum if per_batch else None,
        **usage,
        peak_flop_per_s=peak.flop_per_s if peak else None,
        peak_source=peak.source if peak else None,
        device=devices.device_name(trainer.device),
        diverged_at_step=trainer.diverged_at,
        speedups=[s.name for s in trainer.speedups],
        skipped_speedups=trainer.skipped_speedups,
        strategy=trainer.strategy.name,
        speedup_metrics=trainer.engine.part_metrics(),
    )
    summary.lint = trainer.lint.end(summary.model_dump())  # the lint's traps read the own loop's summary too
    busy = busy_run_note(machine)
    if busy:
        summary.busy = busy
        if trainer.world.is_main:
            log.warning("busy machine: %s", busy)
    return summary


def epochs_done(trainer: Trainer) -> int | float:
    """Whole epochs, or with the share of the one a step budget or a signal stopped in (0.4, where a whole count
    would say 0 of a run that trained); an int when the run stopped between epochs, as `--resume` checks read."""
    try:
        batches = len(trainer.train_loader)
    except TypeError:  # an iterable without a length: only whole epochs can be told
        return trainer.epoch
    if not trainer.batch_in_epoch or not batches:
        return trainer.epoch
    return round(trainer.epoch + trainer.batch_in_epoch / batches, 3)
