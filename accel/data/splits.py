"""What every dataset builder returns."""
from __future__ import annotations

from dataclasses import dataclass

from torch.utils.data import Dataset


@dataclass
class Splits:
    """A train/val pair plus what the trainer needs to know about the samples.

    Samples are `(image, label)`: image a uint8 CxHxW tensor (normalised on the device, where it is
    cheap) or any float tensor (used as is); label an int.
    """

    train: Dataset
    val: Dataset | None
    num_classes: int
    sample_shape: tuple[int, ...]
    mean: tuple[float, ...] = (0.5,)
    std: tuple[float, ...] = (0.5,)
