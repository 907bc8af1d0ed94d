"""`strategy: fsdp` in one process: which speed-ups it refuses, and how a recipe asks for it. Training sharded
across processes is tested in test_distributed.py."""

from __future__ import annotations

import pytest
import torch

from accel.config.recipe import validate_recipe
from accel.errors import AccelError, RecipeError
from accel.models import resnet18_cifar
from accel.speedups import from_configs, refuse
from accel.strategy import FullyShard
from accel.strategy import sharding as fsdp
from conftest import TINY


def speedups(**configs):
    return from_configs(validate_recipe({**TINY, "speedups": configs}).speedups)


def test_speedups_that_cannot_run_sharded_are_refused_together_with_the_reason():
    refused = speedups(channels_last={}, jit={}, ema={}, amp={"dtype": "fp16"}, optim={"impl": "fused"}, compile={})
    with pytest.raises(AccelError) as err:
        refuse(refused, torch.device("cpu"), FullyShard())
    message = str(err.value)
    for name in ("channels_last", "jit", "ema", "amp", "optim", "compile"):
        assert f"`speedups.{name}`" in message
    assert "strategy: ddp" in message


def test_speedups_that_run_sharded_pass():
    refuse(
        speedups(amp={"dtype": "bf16"}, compile={"dynamic": False}, optim={"impl": "auto"}, threads={}, cudnn={}),
        torch.device("cpu"),
        FullyShard(),
    )


def test_blocks_are_the_residual_stages_not_their_layers():
    model = resnet18_cifar(10)
    blocks = list(fsdp._blocks(model))
    assert [type(b).__name__ for b in blocks].count("BasicBlock") == 8
    assert not any(isinstance(b, fsdp.CONTAINERS) for b in blocks)


def test_a_recipe_names_its_strategy_and_a_typo_is_an_error():
    assert validate_recipe({**TINY, "strategy": "fsdp"}).strategy == "fsdp"
    with pytest.raises(RecipeError, match="strategy"):
        validate_recipe({**TINY, "strategy": "fdsp"})
