"""A loader wrapper that has the next batch on the device, converted and normalised, before it is asked for.

On CUDA the copy runs on a side stream (`non_blocking=True`, from pinned memory when the loader pins), so it
overlaps the current step's kernels; the main stream waits on an event for exactly that batch. Elsewhere a
background thread pulls from the loader and prepares batches while the main thread computes. Either way the
batches and their order are exactly those of the wrapped loader.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch
from pydantic import Field

from .. import devices
from ..batches import tensors
from ..schema import StrictModel

Transform = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
_BATCH, _END, _ERROR = "batch", "end", "error"
STOP_TIMEOUT_S = 30.0  # waiting this long for the thread's current batch on an early stop


class PrefetchConfig(StrictModel):
    """Whether the trainer's loaders are wrapped in a DevicePrefetcher."""

    enabled: bool | Literal["auto"] = Field(
        "auto",
        description="`auto`: on for CUDA (side-stream copies overlap compute), off elsewhere, where "
        "loader workers already overlap loading and a thread would take a core from the model.",
    )
    depth: int = Field(
        2,
        ge=1,
        description="Batches prepared ahead by the background thread (non-CUDA devices); "
        "on CUDA one batch is in flight on the side stream.",
    )


def resolve_prefetch(cfg: PrefetchConfig, device: torch.device) -> bool:
    """The configured value, or for `auto`: True exactly on CUDA devices."""
    return device.type == "cuda" if cfg.enabled == "auto" else cfg.enabled


class DevicePrefetcher:
    """Wraps a loader; iterating yields `transform(*to_device(batch))` one step ahead of the consumer.

    Attributes the trainer reads from loaders (sampler, batch_size, len) are those of the wrapped loader.
    """

    def __init__(self, loader: Any, device: torch.device, transform: Transform | None = None, depth: int = 2):
        self.loader, self.device, self.transform, self.depth = loader, device, transform, depth

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes not set in __init__: sampler, batch_size, dataset, num_workers, ...
        if name == "loader":  # not yet set (e.g. during unpickling): avoid infinite recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator[Any]:
        if self.device.type == "cuda" and devices.cuda_available():
            return self._cuda_batches()
        return self._thread_batches()

    def _prepare(self, batch: Any) -> Any:
        batch = devices.to_device(batch, self.device, non_blocking=True)  # any nesting of tensors
        return self.transform(*batch) if self.transform is not None else batch

    # ---- CUDA: side stream ----------------------------------------------------------------------------
    def _cuda_batches(self) -> Iterator[Any]:
        stream = torch.cuda.Stream(self.device)
        pending = None
        for batch in self.loader:
            with torch.cuda.stream(stream):
                ready = self._prepare(batch)
                copied = torch.cuda.Event()
                copied.record(stream)
            if pending is not None:
                yield self._hand_over(*pending)
            pending = (ready, copied)
        if pending is not None:
            yield self._hand_over(*pending)

    def _hand_over(self, batch: Any, copied: torch.cuda.Event) -> Any:
        main = torch.cuda.current_stream(self.device)
        main.wait_event(copied)  # kernels queued from here on see the finished copy, nothing else waits
        for tensor in tensors(batch):
            # allocated on the side stream, used on the main one: keep the allocator from reusing the memory
            # for the side stream's next copy while the main stream may still read it
            tensor.record_stream(main)
        return batch

    # ---- everywhere else: a background thread ---------------------------------------------------------
    def _thread_batches(self) -> Iterator[Any]:
        ready: queue.Queue = queue.Queue(maxsize=self.depth)
        stop = threading.Event()
        source = iter(self.loader)  # here, not in the thread: the sampler's epoch is already set
        worker = threading.Thread(target=self._fill, args=(source, ready, stop), name="accel-prefetch", daemon=True)
        worker.start()
        try:
            while True:
                kind, item = ready.get()
                if kind == _END:
                    return
                if kind == _ERROR:
                    raise item
                yield item
        finally:  # also on an early break: stop the thread instead of leaving it blocked on a full queue
            stop.set()
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while worker.is_alive() and time.monotonic() < deadline:  # a hung loader must not hang us too
                _drain(ready)
                worker.join(timeout=0.05)

    def _fill(self, source: Iterator, ready: queue.Queue, stop: threading.Event) -> None:
        try:
            for batch in source:
                if not _put(ready, (_BATCH, self._prepare(batch)), stop):
                    return
            _put(ready, (_END, None), stop)
        except BaseException as err:  # handed to the consumer, which re-raises it in the main thread
            _put(ready, (_ERROR, err), stop)


def _put(ready: queue.Queue, item: tuple[str, Any], stop: threading.Event) -> bool:
    """Put unless the consumer has stopped; False if it has."""
    while not stop.is_set():
        try:
            ready.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


def _drain(ready: queue.Queue) -> None:
    try:
        while True:
            ready.get_nowait()
    except queue.Empty:
        pass


def wrap_loader(loader: Any, cfg: PrefetchConfig, device: torch.device, transform: Transform | None) -> Any:
    """`loader` wrapped in a DevicePrefetcher when the config (resolved for `device`) enables it."""
    if loader is None or not resolve_prefetch(cfg, device):
        return loader
    return DevicePrefetcher(loader, device, transform, cfg.depth)
