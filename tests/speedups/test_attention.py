"""attention: the chosen scaled-dot-product-attention kernel really runs, in training and evaluation."""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from accel import Trainer
from accel.models import GPT
from accel.speedups.attention import Attention
from accel.tasks import LanguageModel
from accel.train_config import TrainConfig


def ops_run(backend: str | None) -> set[str]:
    torch.manual_seed(0)
    model = GPT(vocab_size=16, context=8, width=16, depth=1, heads=2)
    tokens = torch.randint(0, 16, (4, 9))
    batches = [(tokens[:, :-1], tokens[:, 1:])] * 2
    speedups = [Attention(Attention.Config(backend=backend))] if backend else []
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), batches, val_loader=batches,
                      task=LanguageModel(), speedups=speedups, device="cpu", config=TrainConfig(epochs=1))
    with FlopCounterMode(display=False) as counter:
        summary = trainer.fit()
    assert summary["speedups"] == ([] if backend is None else ["attention"])
    return {str(op) for op in counter.get_flop_counts()["Global"]}


def test_math_runs_the_unfused_reference_and_flash_the_fused_kernel():
    assert "aten.bmm" in ops_run("math")  # Q K^T and A V as batched matmuls
    assert "aten.bmm" not in ops_run("flash") and "aten.bmm" not in ops_run(None)  # the fused CPU kernel


@pytest.mark.parametrize("backend", ["efficient", "cudnn"])
def test_cuda_kernels_are_skipped_on_a_cpu_with_a_reason(backend):
    assert "needs CUDA" in Attention(Attention.Config(backend=backend)).unavailable(torch.device("cpu"))


@pytest.mark.parametrize("backend", ["flash", "cudnn"])
def test_half_precision_kernels_need_amp_on_cuda(backend):
    """torch's flash and cuDNN kernels take no fp32 on CUDA: without amp they are skipped with why, not crashed."""
    from accel.speedups import select_available
    from accel.speedups.amp import Amp

    cuda, attention = torch.device("cuda"), Attention(Attention.Config(backend=backend))
    active, skipped = select_available([attention], cuda)
    assert active == [] and "fp16/bf16 only on CUDA" in skipped["attention"]
    amp = Amp(Amp.Config(dtype="bf16"))
    assert attention.unavailable_beside(cuda, [amp]) is None
    assert attention.unavailable_beside(torch.device("cpu"), []) is None  # the CPU's flash kernel takes fp32
    assert Attention(Attention.Config(backend="efficient")).unavailable_beside(cuda, []) is None
