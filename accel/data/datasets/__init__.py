"""Dataset builders. Importing this package registers every dataset in `accel.registry.DATASETS`.

Each registered class has a pydantic `Config` (extending `DatasetConfig`) and `build(cfg, seed) -> Splits`.
Image samples are `(uint8 CxHxW tensor, int label)`, normalised later, on the device; token datasets serve
`(inputs, targets)` windows of int64 ids.
"""

from .base import DatasetConfig, channel_stats, split_indices
from .cifar10 import Cifar10
from .digits import Digits
from .imagefolder import ImageFileDataset, ImageFolder
from .imported import ImportedDataset
from .memory import TensorImageDataset, split_tensor_dataset
from .mnist import Mnist5k
from .synthetic import Synthetic
from .text import TextFiles, TokenChunks, TokenFile

__all__ = [
    "Cifar10",
    "DatasetConfig",
    "Digits",
    "ImageFileDataset",
    "ImageFolder",
    "ImportedDataset",
    "Mnist5k",
    "Synthetic",
    "TensorImageDataset",
    "TextFiles",
    "TokenChunks",
    "TokenFile",
    "channel_stats",
    "split_indices",
    "split_tensor_dataset",
]
