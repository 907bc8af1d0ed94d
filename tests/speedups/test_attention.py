"""attention: the chosen scaled-dot-product-attention kernel really runs, in training and evaluation."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from accel import Trainer
from accel.config.train_config import TrainConfig
from accel.models import GPT
from accel.speedups import Context, resolve
from accel.speedups.attention import Attention
from accel.strategy import Strategy
from accel.tasks import LanguageModel


def ops_run(backend: str | None) -> set[str]:
    torch.manual_seed(0)
    model = GPT(vocab_size=16, context=8, width=16, depth=1, heads=2)
    tokens = torch.randint(0, 16, (4, 9))
    batches = [(tokens[:, :-1], tokens[:, 1:])] * 2
    speedups = [Attention(Attention.Config(backend=backend))] if backend else []
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        batches,
        val_loader=batches,
        task=LanguageModel(),
        speedups=speedups,
        device="cpu",
        config=TrainConfig(epochs=1),
    )
    with FlopCounterMode(display=False) as counter:
        summary = trainer.fit()
    assert summary["speedups"] == ([] if backend is None else ["attention"])
    return {str(op) for op in counter.get_flop_counts()["Global"]}


@pytest.mark.slow
def test_math_runs_the_unfused_reference_and_flash_the_fused_kernel():
    assert "aten.bmm" in ops_run("math")  # Q K^T and A V as batched matmuls
    assert "aten.bmm" not in ops_run("flash") and "aten.bmm" not in ops_run(None)  # the fused CPU kernel


@pytest.mark.parametrize("backend", ["efficient", "cudnn"])
def test_cuda_kernels_are_skipped_on_a_cpu_with_a_reason(backend):
    assert "needs CUDA" in Attention(Attention.Config(backend=backend)).conflict(Context(torch.device("cpu")))


@pytest.mark.parametrize("backend", ["flash", "cudnn"])
def test_half_precision_kernels_need_amp_on_cuda(backend):
    """torch's flash and cuDNN kernels take no fp32 on CUDA: without amp they are skipped with why, not crashed."""
    cuda, attention = torch.device("cuda"), Attention(Attention.Config(backend=backend))
    active, skipped = resolve([attention], cuda, Strategy())
    assert active == [] and "fp16/bf16 only on CUDA" in skipped["attention"]
    assert attention.conflict(Context(cuda, "bf16")) is None  # amp's precision
    on_cpu = attention.conflict(Context(torch.device("cpu"), "fp32")) or ""  # cudnn: needs CUDA, whatever dtype
    assert "fp16/bf16" not in on_cpu  # the CPU's flash kernel takes fp32
    assert Attention(Attention.Config(backend="efficient")).conflict(Context(cuda, "fp32")) is None


def test_a_model_calling_sdpa_inline_has_attention_and_the_kernel_reaches_it():
    """nanoGPT's pattern (examples/gpt_model.py): F.scaled_dot_product_attention inside a `Block`, no module named
    attention. tune and --ablate offer the kernel to it, and sdpa_kernel does act on the call."""
    import sys

    from accel.models.blocks import model_traits
    from accel.speedups.attention import attention_context
    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from gpt_model import GPT as InlineGPT
        from gpt_model import GPTConfig
    finally:
        sys.path.remove(str(ROOT / "examples"))
    model = InlineGPT(GPTConfig(block_size=8, vocab_size=16, n_layer=1, n_head=2, n_embd=16))
    assert model_traits(model)["has_attention"]
    assert not model_traits(torch.nn.Sequential(torch.nn.Linear(2, 2)))["has_attention"]
    tokens = torch.randint(0, 16, (2, 8))
    for backend, bmm in (("math", True), ("flash", False)):
        with attention_context(backend), FlopCounterMode(display=False) as counter:
            model(tokens)
        assert ("aten.bmm" in {str(op) for op in counter.get_flop_counts()["Global"]}) == bmm
