"""`digits`: scikit-learn's 1797 real 8x8 handwritten digits, the smallest real dataset there is."""

from __future__ import annotations

import torch

from ...extras import import_or_explain
from ...registry import DATASETS
from ..splits import Splits
from .base import DatasetConfig, channel_stats
from .memory import TensorImageDataset, split_tensor_dataset


@DATASETS.register("digits")
class Digits:
    """sklearn.datasets.load_digits as uint8 (1,8,8) images; values 0..16 scaled to 0..255."""

    class Config(DatasetConfig):
        pass

    @staticmethod
    def build(cfg: Digits.Config, seed: int) -> Splits:
        """Load the bundled digits and split them by `val_fraction` with a permutation seeded by `seed`."""
        bunch = import_or_explain("sklearn.datasets", "the `digits` dataset").load_digits()
        pixels = torch.from_numpy(bunch.data).reshape(-1, 1, 8, 8)
        images = (pixels * (255.0 / 16.0)).round().clamp(0, 255).to(torch.uint8)
        data = TensorImageDataset(images, torch.from_numpy(bunch.target))
        train, val = split_tensor_dataset(data, cfg.val_fraction, seed)
        mean, std = channel_stats(train.images)
        return Splits(train, val, num_classes=10, sample_shape=(1, 8, 8), mean=mean, std=std)
