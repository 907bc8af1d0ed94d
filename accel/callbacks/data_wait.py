"""Warns when a run is data-bound: too much of each step spent waiting for the next batch."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..runs.records import EpochRecord, FitSummary
from .base import Callback

if TYPE_CHECKING:
    from ..train.trainer import Trainer

log = logging.getLogger("accel")
DATA_BOUND = 0.2  # above this share of step time waiting for data, the input pipeline is the thing to speed up


def suggestions(data: Any, trainer: Trainer) -> list[str]:
    """Concrete recipe changes that cut the wait, most effective first, for this recipe and device."""
    loader = trainer.train_loader
    dataset = getattr(loader, "dataset", None)
    from_files = dataset is not None and getattr(dataset, "images", None) is None
    cuda = trainer.device.type == "cuda"
    tips = []
    if data.loader.backend == "torch" and from_files and getattr(loader, "num_workers", 1) == 0:
        tips.append("decode in worker processes: `data.loader.num_workers: auto` (or a number)")
    if data.loader.backend == "torch" and from_files and hasattr(dataset, "cache_key") and not data.cache.enabled:
        tips.append(
            "decode the images once and read the decoded copy: `data.cache.enabled: true` "
            "(`accel cache build RECIPE` builds it ahead of time)"
        )
    if data.augment.ops and data.augment.on == "loader":
        tips.append("augment on the device instead of in the workers: `data.augment.on: device`")
    if not data.transforms.empty:
        tips.append("move per-sample CPU work in `data.transforms` to device ops in `data.augment.ops`")
    if cuda and data.prefetch.enabled is False:
        tips.append("overlap the host-to-device copy with compute: `data.prefetch.enabled: auto`")
    if cuda and data.loader.backend == "torch" and hasattr(dataset, "samples"):
        tips.append("decode JPEGs on the GPU with NVIDIA DALI: `data.loader.backend: dali`")
    if getattr(loader, "num_workers", 0) > 0:
        tips.append("prepare more batches ahead: raise `data.loader.prefetch_factor`")
    tips.append("give each step more work per batch (a larger `data.batch_size`): it amortises the per-batch cost")
    return tips


class DataWaitWarning(Callback):
    """One warning per run, at the first epoch whose data-wait share exceeds `threshold` (or at the end)."""

    def __init__(self, data: Any, threshold: float = DATA_BOUND):
        self.data, self.threshold, self.warned = data, threshold, False

    def on_epoch_end(self, trainer: Trainer, record: EpochRecord) -> None:
        self._check(trainer, record.data_wait_fraction)

    def on_fit_end(self, trainer: Trainer, summary: FitSummary) -> None:
        if summary.status != "failed":  # a loader that raised was not slow: its error is the message
            self._check(trainer, summary.data_wait_fraction)

    def _check(self, trainer: Trainer, fraction: float | None) -> None:
        if self.warned or fraction is None or fraction <= self.threshold:
            return
        self.warned = True
        tips = "\n".join(f"  - {tip}" for tip in suggestions(self.data, trainer))
        log.warning(
            "data-bound: %.0f%% of step time went to waiting for the next batch (more than %.0f%%). Try:\n%s",
            100 * fraction,
            100 * self.threshold,
            tips,
        )
