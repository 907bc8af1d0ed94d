"""What every dataset shares: the common config fields and the seeded train/val split."""

from __future__ import annotations

import torch
from pydantic import Field

from ...errors import DataError
from ...schema import StrictModel


class DatasetConfig(StrictModel):
    """Fields every dataset accepts; each dataset's `Config` extends this."""

    name: str = Field(description="Registry name of the dataset, e.g. `mnist5k`, `cifar10`, `imagefolder`.")
    val_fraction: float = Field(
        0.2,
        ge=0.0,
        lt=1.0,
        description="Share of the samples held out for validation when the dataset has no split of its own. "
        "0 means no validation set.",
    )


def split_indices(n: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, val) index tensors: a permutation from a private generator picks the sets, so the split
    depends on `seed` alone, never on the global RNG. Each set keeps the source order (file locality);
    shuffling is the sampler's job."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_val = int(round(n * val_fraction))
    if n_val >= n:
        raise DataError(
            f"data.dataset.val_fraction {val_fraction:g} of {n} samples holds out {n_val} for "
            "validation and leaves no training sample: lower data.dataset.val_fraction (or use more "
            "samples)."
        )
    return perm[n_val:].sort().values, perm[:n_val].sort().values


def channel_stats(images: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of a uint8 NCHW tensor, in [0, 1] units."""
    x = images.transpose(0, 1).reshape(images.shape[1], -1).float().div_(255)
    std = x.std(dim=1).clamp_min(1e-3)  # a constant channel must not divide by zero later
    return tuple(x.mean(dim=1).tolist()), tuple(std.tolist())
