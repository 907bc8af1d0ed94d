"""float8 via torchao: which layers convert, the refusal off FP8 GPUs, and a real run where there is one."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch import nn

from accel.speedups import Context
from accel.speedups.float8 import FP8_CAPABILITY, Float8, eligible
from conftest import cuda_only


def test_only_large_linear_layers_outside_the_skip_list_are_eligible():
    assert eligible(nn.Linear(1024, 4096), "blocks.0.mlp.fc", 1024, ["head"])
    assert not eligible(nn.Linear(1024, 512), "blocks.0.proj", 1024, [])  # too small to gain
    assert not eligible(nn.Linear(1024, 1030), "blocks.0.fc", 1024, [])  # not a multiple of 16
    assert not eligible(nn.Linear(4096, 4096), "lm_head", 1024, ["lm_head"])
    assert not eligible(nn.Conv2d(1024, 1024, 1), "conv", 16, [])


def test_elsewhere_it_is_skipped_with_the_reason():
    reason = Float8().conflict(Context(torch.device("cpu")))
    assert "CUDA GPU with FP8" in reason and "8.9" in reason


def _fp8_gpu() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= FP8_CAPABILITY


@cuda_only
@pytest.mark.skipif(
    not _fp8_gpu() or importlib.util.find_spec("torchao") is None,
    reason="needs a GPU with FP8 (compute capability 8.9+) and torchao",
)
def test_float8_converts_the_large_layers_and_trains():
    from accel import Trainer

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, 1024), nn.GELU(), nn.Linear(1024, 16))
    data = [(torch.randn(256, 1024), torch.randint(0, 16, (256,))) for _ in range(8)]
    speedup = Float8(Float8.Config(skip=["4"]))  # the head, by its name in the Sequential
    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-3), data, device="cuda", speedups=[speedup])
    summary = trainer.fit()
    assert summary["status"] == "completed" and summary["skipped_speedups"] == {}
    assert speedup.converted == ["0", "2"]
    assert summary["speedup_metrics"]["float8"] == {"converted_layers": 2}
    assert type(trainer.module[0]).__name__ == "Float8Linear" and type(trainer.module[4]) is nn.Linear
