"""What the profiling tests run: a dataset whose samples take long to make (a slow `__getitem__`, like decoding
large images without workers: with `num_workers: 0` the step waits for the loader), and a model that runs out of
CUDA memory."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset

from accel.data import Splits


class SlowSamples(Dataset):
    def __init__(self, count: int, delay_s: float):
        self.count, self.delay_s = count, delay_s
        self.images = torch.randint(0, 256, (count, 1, 8, 8), dtype=torch.uint8)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        time.sleep(self.delay_s)  # the work a real loader would do: the process is busy, not the model
        return self.images[index], index % 4


def slow_samples(delay_s: float = 0.05) -> Splits:
    return Splits(SlowSamples(32, delay_s), SlowSamples(8, 0.0), num_classes=4, sample_shape=(1, 8, 8))


class Greedy(torch.nn.Module):
    """A model whose forward asks for more memory than any GPU has (`tests/profiling/test_profile_cuda.py`)."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.head = torch.nn.Linear(64, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        held = torch.empty(1 << 38, device=images.device)  # 1 TiB of float32: out of memory
        return self.head(images.flatten(1).float()) + held[:1]


def greedy(num_classes: int) -> Greedy:
    return Greedy(num_classes)
