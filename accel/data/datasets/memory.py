"""A dataset that is already a tensor: indexing is a copy-free view, so it needs no loader workers."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.utils.data import Dataset

from ...errors import DataError
from .base import split_indices


class GatheredBatch(NamedTuple):
    """A batch an in-memory dataset gathered in one piece; the loader's `collate` passes it through."""

    inputs: torch.Tensor
    targets: torch.Tensor


class GatheredDict(dict):
    """A dict batch an in-memory dataset gathered in one piece; `collate` passes it through as a plain dict."""


class TensorImageDataset(Dataset):
    """uint8 NCHW `images` with int64 `labels`; samples are `(CxHxW uint8 tensor, int label)`."""

    in_memory = True  # indexing is a copy-free view: no loader workers needed

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        if images.dtype != torch.uint8 or images.dim() != 4:
            raise DataError(f"in-memory images must be a uint8 NCHW tensor, got {images.dtype} {tuple(images.shape)}")
        if len(images) != len(labels):
            raise DataError(f"{len(images)} images but {len(labels)} labels")
        self.images = images
        self.labels = labels.to(torch.int64)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.images[index], int(self.labels[index])

    def __getitems__(self, indices: list[int]) -> GatheredBatch:
        # One gather for the whole batch, not batch_size __getitem__ calls and a stack of as many tensors: on an
        # H100 that per-sample path could not keep up with a ResNet-18 step at batch 512 (docs/gpu/README.md).
        idx = torch.as_tensor(indices, dtype=torch.int64)
        # index_select, not images[idx]: advanced indexing copies uint8 images ~100x slower (torch 2.14, CPU)
        return GatheredBatch(self.images.index_select(0, idx), self.labels.index_select(0, idx))

    def subset(self, indices: torch.Tensor) -> TensorImageDataset:
        """A new dataset holding a copy of the selected samples, in the given order."""
        return TensorImageDataset(self.images[indices], self.labels[indices])


def split_tensor_dataset(
    data: TensorImageDataset, val_fraction: float, seed: int
) -> tuple[TensorImageDataset, TensorImageDataset | None]:
    """Seeded train/val split of an in-memory dataset; val is None when val_fraction is 0."""
    train_idx, val_idx = split_indices(len(data), val_fraction, seed)
    return data.subset(train_idx), (data.subset(val_idx) if len(val_idx) else None)
