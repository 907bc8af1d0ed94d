"""channels_last: weights, batches and activations in NHWC, with the optimizer still training the same tensors."""

from __future__ import annotations

import torch
from torch import nn

from accel.speedups.channels_last import apply_channels_last, to_channels_last

CL = torch.channels_last


def layouts_seen(trainer) -> dict[str, set[bool]]:
    """Fit `trainer`, recording whether model inputs and convolution outputs were channels-last."""
    seen: dict[str, set[bool]] = {"inputs": set(), "conv_outputs": set()}
    trainer.module.register_forward_pre_hook(
        lambda _m, args: seen["inputs"].add(args[0].is_contiguous(memory_format=CL))
    )
    for module in trainer.module.modules():
        if isinstance(module, nn.Conv2d):
            module.register_forward_hook(
                lambda _m, _i, out: seen["conv_outputs"].add(out.is_contiguous(memory_format=CL))
            )
    trainer.fit()
    return seen


def conv_weights(module: nn.Module) -> list[torch.Tensor]:
    return [p for p in module.parameters() if p.dim() == 4]


def test_weights_batches_and_activations_are_channels_last(make_trainer):
    trainer = make_trainer({"channels_last": {}})
    assert layouts_seen(trainer) == {"inputs": {True}, "conv_outputs": {True}}
    assert conv_weights(trainer.module) and all(p.is_contiguous(memory_format=CL) for p in conv_weights(trainer.module))


def test_without_it_everything_stays_nchw(make_trainer):
    trainer = make_trainer({})
    assert layouts_seen(trainer) == {"inputs": {False}, "conv_outputs": {False}}
    assert not any(p.is_contiguous(memory_format=CL) for p in conv_weights(trainer.module))


def test_the_optimizer_keeps_training_the_same_parameters_to_the_same_result(make_trainer):
    nchw, nhwc = make_trainer({}), make_trainer({"channels_last": {}})
    before = [p for group in nhwc.optimizer.param_groups for p in group["params"]]
    start = [p.detach().clone() for p in before]
    nchw.fit(), nhwc.fit()
    # the same objects (the groups hold them in their own order: AdamW's 1-D parameters in a group of their own)
    assert {id(p) for p in before} == {id(p) for p in nhwc.module.parameters()} and len(before) == len(start)
    assert any(not torch.equal(a, b) for a, b in zip(start, nhwc.module.parameters())), "the steps must apply"
    for a, b in zip(nchw.module.parameters(), nhwc.module.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # same maths, another summation order


def test_each_rank_gets_its_own_layout_and_other_ranks_pass_through():
    assert to_channels_last(torch.zeros(2, 3, 4, 5)).is_contiguous(memory_format=torch.channels_last)
    assert to_channels_last(torch.zeros(2, 3, 4, 5, 6)).is_contiguous(memory_format=torch.channels_last_3d)
    flat = torch.zeros(2, 3)
    assert to_channels_last(flat) is flat
    model = apply_channels_last(nn.Sequential(nn.Conv3d(2, 4, 3), nn.Conv2d(4, 4, 3), nn.Linear(3, 3)))
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last_3d)
    assert model[1].weight.is_contiguous(memory_format=torch.channels_last)
