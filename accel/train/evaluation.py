"""Evaluation: the task's metrics over the validation set, summed on the device, then across processes."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import torch

from .. import devices
from ..errors import AccelError

if TYPE_CHECKING:
    from .trainer import Trainer


def evaluate(trainer: Trainer, stop: Callable[[], bool] | None = None) -> dict[str, Any] | None:
    """The task's metrics over the validation set (`val_loss` always): one sync for the whole pass. None when
    `stop()` turned true between two batches (a signal): a part of the set gives no metrics, so nothing is kept.
    With several processes `stop` is not given: each would have to agree to stop at the same batch."""
    if trainer.val_loader is None:
        return {}
    trainer.model.eval()
    sums: dict[str, torch.Tensor] = {}
    count, batch = 0, None
    val = trainer.val_loader
    batches = min(len(val), trainer.cfg.eval_max_batches or len(val)) if hasattr(val, "__len__") else 0
    short = trainer.strategy.eval_forwards_short(batches, trainer.world, trainer.device)
    with ExitStack() as stack:
        stack.enter_context(trainer.engine.eval_contexts())  # outside inference mode: EMA swaps weights in place
        stack.enter_context(devices.inference_mode(trainer.device))
        for batch in itertools.islice(trainer.val_loader, trainer.cfg.eval_max_batches):
            if stop is not None and stop():
                trainer.model.train()
                return None
            batch = trainer.on_device(batch, trainer.eval_transform)
            for name, value in _eval_sums(trainer, batch).items():
                sums[name] = sums[name] + value if name in sums else value.double()
            count += trainer.task.samples(batch)
        for _ in range(short):  # results unused: the forward only takes part in the weight gathering
            _eval_sums(trainer, batch)
    trainer.model.train()
    world = trainer.world
    if not sums and world.distributed:  # the others would wait for sums this rank cannot name
        raise AccelError(
            f"rank {world.rank} has no validation samples: give the validation split at "
            "least one sample per process, or use fewer processes"
        )
    names = sorted(sums)
    values = torch.stack([sums[n] for n in names] + [torch.tensor(count, dtype=torch.float64, device=trainer.device)])
    totals = dict(zip(names + ["count"], world.all_reduce_sum(values).tolist()))
    return trainer.task.metrics(totals)


def _eval_sums(trainer: Trainer, batch: Any) -> dict[str, torch.Tensor]:
    with trainer.step_contexts():
        return trainer.task.eval_sums(trainer.model, batch)
