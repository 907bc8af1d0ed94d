"""What every dataset builder returns."""

from __future__ import annotations

from dataclasses import dataclass

from torch.utils.data import Dataset


@dataclass
class Splits:
    """A train/val pair plus what the trainer needs to know about the samples.

    Image samples are `(image, label)`: image a uint8 CxHxW tensor (normalised on the device, where it is
    cheap) or any float tensor (used as is); label an int. Token samples (`vocab_size` set) are
    `(inputs, targets)` id windows of `sample_shape == (context,)`, with nothing to normalise.
    """

    train: Dataset
    val: Dataset | None
    num_classes: int
    sample_shape: tuple[int, ...]
    mean: tuple[float, ...] = (0.5,)
    std: tuple[float, ...] = (0.5,)
    vocab_size: int | None = None

    @property
    def tokens(self) -> bool:
        return self.vocab_size is not None

    @property
    def images(self) -> bool:
        """CxHxW samples, normalised on the device; anything else (a user's own features, dicts) passes as is."""
        return not self.tokens and len(self.sample_shape) == 3

    def model_args(self) -> dict[str, int]:
        """What the data says about the model's shape, for the builders that take it."""
        if self.tokens:
            return {"num_classes": self.num_classes, "vocab_size": self.vocab_size, "context": self.sample_shape[0]}
        return {"num_classes": self.num_classes, "in_channels": self.sample_shape[0]}
