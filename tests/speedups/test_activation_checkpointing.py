"""activation_checkpointing: repeated blocks recompute their forward in the backward, with the same gradients."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accel import Trainer
from accel.config.train_config import TrainConfig
from accel.models import GPT
from accel.speedups.activation_checkpointing import ActivationCheckpointing, repeated_blocks
from accel.tasks import LanguageModel


def test_the_repeated_blocks_are_found_in_a_gpt_and_by_class_name():
    model = GPT(vocab_size=16, context=8, width=16, depth=3, heads=2)
    assert repeated_blocks(model) == list(model.blocks)
    assert repeated_blocks(model, ["LayerNorm"]) == [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert repeated_blocks(nn.Sequential(nn.Linear(2, 2), nn.ReLU())) == []


def fit(speedups) -> tuple[list[torch.Tensor], int, dict]:
    torch.manual_seed(0)
    model = GPT(vocab_size=16, context=8, width=16, depth=3, heads=2)
    calls = []
    for block in model.blocks:
        block.attn.register_forward_hook(lambda *_: calls.append(1))
    tokens = torch.randint(0, 16, (4, 9))
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        [(tokens[:, :-1], tokens[:, 1:])] * 2,
        task=LanguageModel(),
        speedups=speedups,
        device="cpu",
        config=TrainConfig(epochs=1),
    )
    summary = trainer.fit()
    return [p.detach().clone() for p in model.parameters()], len(calls), summary


@pytest.mark.slow
def test_checkpointed_blocks_run_their_forward_twice_and_train_identically():
    plain, plain_calls, plain_summary = fit([])
    every, every_calls, every_summary = fit([ActivationCheckpointing()])
    second, second_calls, _ = fit([ActivationCheckpointing(ActivationCheckpointing.Config(every=2))])
    steps, count = 2, 3  # and the first batch's FLOP count: a forward of its own, never recomputed
    assert plain_calls == steps * 3 + count and every_calls == steps * 3 * 2 + count
    assert second_calls == steps * (3 + 2) + count  # blocks 0 and 2
    for a, b, c in zip(plain, every, second):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, c)
    # MFU counts the model's FLOPs: the recomputed forward is the hardware's extra work, not the model's
    assert every_summary["flops_per_step"] == plain_summary["flops_per_step"] > 0


def test_teardown_restores_the_blocks_forward():
    model = GPT(vocab_size=16, context=8, width=16, depth=2, heads=2)
    speedup = ActivationCheckpointing()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), [], task=LanguageModel(), device="cpu")
    speedup.setup(trainer)
    assert "forward" in vars(model.blocks[0]) and speedup.metrics() == {"blocks": 2}
    speedup.teardown()
    assert "forward" not in vars(model.blocks[0])
