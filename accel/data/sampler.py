"""The one sampler the trainer uses: its order is a function of (seed, epoch) alone, so a resumed run and
every rank of a distributed run agree on it without sharing any RNG state."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler

_GOLDEN = 0x9E3779B97F4A7C15  # odd 64-bit constant: spreads seeds apart so (seed, epoch) pairs do not collide


def epoch_seed(seed: int, epoch: int) -> int:
    """Generator seed for one epoch. Unlike `seed + epoch`, (0, 1) and (1, 0) give different orders."""
    return (seed * _GOLDEN + epoch) % 2**63


class EpochSampler(Sampler[int]):
    """Indices for one epoch, reproducible from (seed, epoch) alone, shardable, resumable mid-epoch.

    With world_size > 1 the permutation is padded by wrapping around so it divides evenly, and rank r takes
    indices[r::world_size], as torch's DistributedSampler does: every rank sees the same number of batches.
    """

    def __init__(
        self, num_samples: int, *, shuffle: bool, seed: int, rank: int = 0, world_size: int = 1, pad: bool = True
    ):
        if num_samples < 1:
            raise ValueError(f"EpochSampler needs at least one sample, got num_samples={num_samples}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"EpochSampler: rank {rank} is not in [0, world_size={world_size})")
        self.num_samples, self.shuffle, self.seed = num_samples, shuffle, seed
        self.rank, self.world_size = rank, world_size
        # pad=False (evaluation): ranks may differ by one sample, but no sample is counted twice
        self.per_rank = -(-num_samples // world_size) if pad else len(range(rank, num_samples, world_size))
        self.pad = pad
        self.epoch, self.skip = 0, 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Select the epoch's order; `skip` drops that many of this rank's first indices (resume mid-epoch)."""
        if not 0 <= skip <= self.per_rank:
            raise ValueError(f"EpochSampler: skip={skip} is outside [0, {self.per_rank}] for this rank")
        self.epoch, self.skip = epoch, skip

    def rank_indices(self) -> torch.Tensor:
        """This rank's full index list for the current epoch, before `skip`."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
            order = torch.randperm(self.num_samples, generator=generator)
        else:
            order = torch.arange(self.num_samples)
        total = self.per_rank * self.world_size
        if self.pad and total > self.num_samples:  # repeat, not just one wrap: fewer samples than ranks must still work
            order = order.repeat(-(-total // self.num_samples))[:total]
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.rank_indices()[self.skip :].tolist())

    def __len__(self) -> int:
        return self.per_rank - self.skip
