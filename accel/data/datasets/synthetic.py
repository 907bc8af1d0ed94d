"""`synthetic`: random but learnable images, for speed tests that must not depend on any file."""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field

from ...registry import DATASETS
from ..splits import Splits
from .base import DatasetConfig, channel_stats
from .memory import TensorImageDataset, split_tensor_dataset


def make_synthetic(shape: list[int], num_samples: int, num_classes: int, noise: float, seed: int) -> TensorImageDataset:
    """Each class has a fixed random prototype image; a sample is its class prototype plus Gaussian noise."""
    g = torch.Generator().manual_seed(seed)
    prototypes = torch.randint(0, 256, (num_classes, *shape), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, num_classes, (num_samples,), generator=g)
    images = torch.randn((num_samples, *shape), generator=g).mul_(noise * 255).add_(prototypes[labels])
    return TensorImageDataset(images.clamp_(0, 255).to(torch.uint8), labels)


@DATASETS.register("synthetic")
class Synthetic:
    """Deterministic from the seed; classes are separable, so a loss falls and accuracy rises."""

    class Config(DatasetConfig):
        shape: list[Annotated[int, Field(ge=1)]] = Field(
            [3, 32, 32], min_length=3, max_length=3, description="Image shape as [channels, height, width]."
        )
        num_samples: int = Field(1024, ge=1, description="Samples generated in all, before the train/val split.")
        num_classes: int = Field(10, ge=2, description="Number of classes, each with its own prototype image.")
        noise: float = Field(
            0.25, ge=0.0, description="Std of the per-pixel noise as a fraction of 255; larger is harder to learn."
        )

    @staticmethod
    def build(cfg: Synthetic.Config, seed: int) -> Splits:
        """Generate the samples from `seed`, then split them by `val_fraction`."""
        data = make_synthetic(cfg.shape, cfg.num_samples, cfg.num_classes, cfg.noise, seed)
        train, val = split_tensor_dataset(data, cfg.val_fraction, seed)
        mean, std = channel_stats(train.images)
        return Splits(train, val, num_classes=cfg.num_classes, sample_shape=tuple(cfg.shape), mean=mean, std=std)
