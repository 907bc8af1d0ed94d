"""`cifar10`: the standard python-pickle release (cifar-10-python.tar.gz), loaded whole into memory."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from ...errors import DataError
from ...registry import DATASETS
from ..splits import Splits
from .base import DatasetConfig
from .memory import TensorImageDataset, split_tensor_dataset

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILE = "test_batch"
GET_IT = (
    f"Download https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz and extract it so that "
    f"ROOT/{FOLDER}/ holds data_batch_1..data_batch_5 and test_batch; then set `root` to ROOT."
)


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only: a downloaded file cannot run code on load."""

    ALLOWED = {
        (f"numpy.{core}.{module}", name)
        for core in ("core", "_core")  # numpy 1 and numpy 2 spell the module differently
        for module, name in (("multiarray", "_reconstruct"), ("multiarray", "scalar"), ("numeric", "_frombuffer"))
    } | {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}  # py3 protocol-2 bytes need _codecs

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def find_batches_dir(root: str) -> Path:
    """ROOT/cifar-10-batches-py, or ROOT itself when it is that folder."""
    path = Path(root).expanduser()
    if not path.is_dir():
        raise DataError(f"cifar10: root {path} does not exist or is not a folder. {GET_IT}")
    return path / FOLDER if (path / FOLDER).is_dir() else path


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch -> (N,3,32,32) uint8 images and int64 labels; any flaw is a DataError naming the file."""
    if not path.is_file():
        raise DataError(
            f"cifar10: missing {path}. Expected the layout ROOT/{FOLDER}/"
            f"{{{','.join(TRAIN_FILES)},{TEST_FILE}}}. {GET_IT}"
        )
    try:
        with path.open("rb") as f:
            batch = _ArrayUnpickler(f, encoding="bytes").load()
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
        images = data.reshape(-1, 3, 32, 32)  # rows are channel-planar RGB: 1024 R, then G, then B
    except Exception as e:  # pickle, key, type and shape errors all mean the same thing to the user
        raise DataError(
            f"cifar10: {path} is not a CIFAR-10 python batch ({type(e).__name__}: {e}). Expected a "
            f"pickled dict with b'data' (N x 3072 uint8) and b'labels' (N ints). {GET_IT}"
        ) from e
    if len(images) != len(labels) or data.shape[-1] != 3072:
        raise DataError(
            f"cifar10: {path} has data of shape {data.shape} and {len(labels)} labels; "
            f"expected N x 3072 and N labels. {GET_IT}"
        )
    return images, labels


def read_split(folder: Path, names: list[str]) -> TensorImageDataset:
    """Concatenate the named batch files into one in-memory dataset."""
    parts = [read_batch(folder / name) for name in names]
    images = torch.from_numpy(np.concatenate([p[0] for p in parts]))
    return TensorImageDataset(images, torch.from_numpy(np.concatenate([p[1] for p in parts])))


@DATASETS.register("cifar10")
class Cifar10:
    """50000 train / 10000 test 32x32 RGB images in 10 classes, from files the user already has."""

    class Config(DatasetConfig):
        root: str = Field(
            description=f"Folder holding {FOLDER}/ (or that folder itself), as extracted from "
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz."
        )
        val_split: Literal["test", "fraction"] = Field(
            "test",
            description="`test`: validate on test_batch. `fraction`: hold out `val_fraction` of the "
            "training batches instead (val_fraction is ignored otherwise).",
        )

    @staticmethod
    def build(cfg: Cifar10.Config, seed: int) -> Splits:
        """Load the batches; split by the test batch or by a seeded permutation of the training batches."""
        folder = find_batches_dir(cfg.root)
        train = read_split(folder, TRAIN_FILES)
        if cfg.val_split == "test":
            val = read_split(folder, [TEST_FILE])
        else:
            train, val = split_tensor_dataset(train, cfg.val_fraction, seed)
        return Splits(
            train,
            val,
            num_classes=10,
            sample_shape=(3, 32, 32),
            mean=(0.4914, 0.4822, 0.4465),
            std=(0.2470, 0.2435, 0.2616),
        )
