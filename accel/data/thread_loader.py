"""Loader workers as threads: a DataLoader whose batches a pool of threads in this process makes, in order.

Where decoding releases the GIL (torchvision's `decode_jpeg`, PIL, OpenCV), threads decode in parallel like
worker processes, but share the dataset's memory and hand batches over without pickling them through shared
memory. The indices come from the loader's own batch sampler and each batch is collated as a single-process
DataLoader would, so with a deterministic dataset the batches are exactly those of worker processes. Random
per-sample transforms draw from the one process-wide generator, so their draws differ from the processes'.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data._utils.pin_memory import pin_memory

from ..errors import DataError


class ThreadLoader(DataLoader):
    """A DataLoader (length, sampler, batch size as given) whose iterator maps batches of indices over a pool of
    `threads` threads, keeping `threads * prefetch_factor` batches in flight, pinned when `pin_memory` is set."""

    def __init__(self, dataset: Any, *, threads: int, prefetch_factor: int, **kwargs: Any):
        if isinstance(dataset, IterableDataset):
            raise DataError(
                "data.loader.workers_kind: threads needs a dataset indexed by position (a map-style dataset); "
                f"{type(dataset).__name__} is iterable: use workers_kind: processes."
            )
        super().__init__(dataset, num_workers=0, **kwargs)
        self.threads, self.ahead = threads, threads * prefetch_factor

    def __iter__(self) -> Iterator[Any]:
        return _batches(self)


def _batches(loader: ThreadLoader) -> Iterator[Any]:
    indices = iter(loader.batch_sampler)
    pool = ThreadPoolExecutor(loader.threads, thread_name_prefix="accel-loader")
    try:
        pending: deque[Future] = deque(pool.submit(_fetch, loader, i) for _, i in zip(range(loader.ahead), indices))
        while pending:
            batch = pending.popleft().result()  # in order: the next batch, whichever thread finished first
            more = next(indices, None)
            if more is not None:
                pending.append(pool.submit(_fetch, loader, more))
            yield batch
    finally:  # also on an early stop: drop the batches not started, wait for those being made
        pool.shutdown(wait=True, cancel_futures=True)


def _fetch(loader: ThreadLoader, indices: list[int]) -> Any:
    """One batch as torch's single-process fetcher makes it (a dataset's `__getitems__` first)."""
    dataset = loader.dataset
    getitems = getattr(dataset, "__getitems__", None)
    samples = getitems(indices) if getitems else [dataset[i] for i in indices]
    batch = loader.collate_fn(samples)
    return pin_memory(batch) if loader.pin_memory else batch
