"""The loaders `Engine.setup_dataloaders` hands back: batches on the device, one shard per process, a position
that `eng.save` / `eng.load` keep, and the batches counted for the engine's measurements.

Under several processes a DataLoader whose sampler is not rank-aware is rebuilt around a DistributedSampler; one
whose sampler already knows its rank (a DistributedSampler, or any sampler with `num_replicas` and `rank`) is left
alone, so no process sees a shard of a shard.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

if TYPE_CHECKING:
    from ..strategy.world import World
    from .core import Core

log = logging.getLogger("accel")


def rank_aware(sampler: Any) -> bool:
    return isinstance(sampler, DistributedSampler) or (hasattr(sampler, "num_replicas") and hasattr(sampler, "rank"))


def sharded(loader: Any, world: World) -> Any:
    """The loader, with one shard of the data per process where it needs one."""
    if not world.distributed or not isinstance(loader, DataLoader):
        return loader
    if isinstance(loader.dataset, IterableDataset):
        log.warning("accel: an IterableDataset is not sharded by the engine: it must give each rank its own part")
        return loader
    sampler = loader.sampler
    if rank_aware(sampler) or rank_aware(getattr(loader.batch_sampler, "sampler", None)):
        return loader  # the loop shards already
    if loader.batch_sampler is not None and type(loader.batch_sampler).__name__ != "BatchSampler":
        log.warning("accel: a custom batch sampler is not sharded by the engine: each rank sees every batch")
        return loader
    shuffle = isinstance(sampler, RandomSampler)  # every rank must draw the same order: one seed, set_epoch
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=DistributedSampler(loader.dataset, world.size, world.rank, shuffle=shuffle, drop_last=loader.drop_last),
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
    )


class DeviceLoader:
    """Iterates `loader`, each batch moved to the engine's device (and prepared by its speed-ups: memory format).

    Its state is where the current epoch stands: the random state its epoch started from and how many batches
    were taken. Loaded, the next pass draws the same order and skips those batches, so a run resumed mid-epoch
    sees exactly the batches the uninterrupted run saw. A loader with a state of its own (torchdata's
    StatefulDataLoader) keeps it instead."""

    def __init__(self, loader: Any, engine: Core, train: bool):
        self.loader, self.engine, self.train = loader, engine, train
        self.epoch = 0  # passes started (DistributedSampler.set_epoch: another order each epoch)
        self.taken = 0  # batches taken in the current pass
        self._finished = True  # the last pass ran to its end: the next one starts afresh
        self._epoch_rng: torch.Tensor | None = None
        self._resume: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:  # dataset, batch_size, sampler...: the loader's
        return getattr(self.__dict__["loader"], name)

    def __iter__(self) -> Iterator:
        iterator, self._finished = self._start(), False
        engine, train, anatomy = self.engine, self.train, self.engine.anatomy
        # the profile's phases (accel.measure.anatomy; a flag test otherwise): an evaluation loader's batches are `eval`
        fetching, copying = ("data", "to_device") if train else ("eval", "eval")
        while True:
            fetch = time.perf_counter()
            try:
                with anatomy.phase(fetching):
                    batch = next(iterator)
            except StopIteration:
                self._finished = True
                return
            self.taken += 1
            if train:
                engine.count.data_s += time.perf_counter() - fetch
            with anatomy.phase(copying):
                batch = engine.on_device(batch)
            yield batch

    def _start(self) -> Iterator:
        """A new pass; after a load, the interrupted pass, drawn in the same order, past the batches it took."""
        resume, self._resume, self.taken = self._resume, None, 0
        if resume is not None:
            self.epoch = resume["epoch"]
        self._epoch_rng = torch.get_rng_state()
        if resume is not None and resume.get("taken"):
            now = torch.get_rng_state()
            self._epoch_rng = resume["epoch_rng"]
            torch.set_rng_state(self._epoch_rng)  # the order the interrupted pass drew ...
        sampler = getattr(self.loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)
        self.epoch += 1
        iterator = iter(self.loader)
        if resume is not None and resume.get("taken"):
            for _ in range(resume["taken"]):  # samplers draw their order at the first batch
                next(iterator, None)
            self.taken = resume["taken"]
            torch.set_rng_state(now)  # ... and the run goes on from the checkpoint's random state
        return iterator

    def state_dict(self) -> dict[str, Any]:
        if hasattr(self.loader, "state_dict"):
            return {"loader": self.loader.state_dict()}
        if self._finished:  # between passes: the next one starts afresh
            return {"epoch": self.epoch}
        return {"epoch": self.epoch - 1, "taken": self.taken, "epoch_rng": self._epoch_rng}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "loader" in state:
            self.loader.load_state_dict(state["loader"])
        else:
            self._resume = state
