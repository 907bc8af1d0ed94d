"""An epoch's batches from the training loader, starting where a resumed run left off."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import AccelError


def epoch_batches(loader: Iterable, epoch: int, done: int) -> tuple[Iterator, int | None]:
    """Epoch `epoch`'s batches after the first `done` (> 0 when resuming mid-epoch), and the epoch's full batch
    count (None for a loader without a length)."""
    set_epoch = getattr(getattr(loader, "sampler", None), "set_epoch", None)
    resumable = set_epoch is not None and "skip" in inspect.signature(set_epoch).parameters
    if resumable:  # the sampler starts at the resume point, nothing is loaded twice
        set_epoch(epoch, skip=done * _batch_size(loader))
    elif set_epoch is not None:
        set_epoch(epoch)
    batches = _length(loader)
    if batches == 0:
        raise AccelError(
            "the training loader yields no batches: is data.batch_size larger than the training "
            "set (the last incomplete batch is dropped with data.drop_last: true)?"
        )
    iterator = iter(loader)
    if resumable:
        return iterator, None if batches is None else batches + done
    for _ in range(done):  # any other loader: replay it to the resume point
        next(iterator, None)
    return iterator, batches


def no_batch_message(epoch: int, step: int) -> str:
    """Why epoch `epoch` (0-based) got no batch from the loader."""
    if epoch == 0:
        return "the training loader yielded no batch: it is empty"
    return (
        f"the training loader yielded no batch in epoch {epoch + 1}, after {step} steps: it is "
        "exhausted after one pass, like a generator, so every epoch after the first would train nothing. "
        "Pass a loader that starts over each time it is iterated (a DataLoader, a list, or an object "
        "whose __iter__ returns a new iterator), or set train.max_steps to stop within the first pass."
    )


def _length(loader: Iterable) -> int | None:
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None


def _batch_size(loader: Any) -> int:
    return getattr(loader, "batch_size", None) or 1
