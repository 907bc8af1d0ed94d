"""A user's own dataset for the compatibility suite: token sequences with a class label each, served as the dict
samples Hugging Face sequence classifiers take (`dataset: {name: "tests.compat.data:token_classes"}`)."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from accel.data import Splits

VOCAB, LENGTH = 64, 12


class TokenClasses(Dataset):
    """`{"input_ids", "attention_mask", "labels"}` samples; the label is whether token 0 is in the upper half."""

    def __init__(self, ids: torch.Tensor):
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = self.ids[index]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": (ids[0] >= VOCAB // 2).long()}


def token_classes(num_samples: int = 64, seed: int = 0, val_fraction: float = 0.25) -> Splits:
    ids = torch.randint(0, VOCAB, (num_samples, LENGTH), generator=torch.Generator().manual_seed(seed))
    n_val = int(num_samples * val_fraction)
    return Splits(TokenClasses(ids[n_val:]), TokenClasses(ids[:n_val]), num_classes=2, sample_shape=(LENGTH,))
