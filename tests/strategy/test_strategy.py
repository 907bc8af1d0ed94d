"""The Strategy / Precision seam and the one conflict rule, without processes or devices of their own."""

from __future__ import annotations

import pytest
import torch

from accel.config.recipe import validate_recipe
from accel.errors import AccelError
from accel.speedups import from_configs, refusals, resolve, setup_order
from accel.speedups.amp import Amp
from accel.strategy import DataParallel, FullyShard, Strategy, choose
from accel.strategy.precision import Autocast, Precision, ScaledFp16
from accel.strategy.setup_phases import Phase
from accel.strategy.world import World
from accel.strategy.xla import Xla
from conftest import TINY

CPU = torch.device("cpu")


def built(**configs):
    return from_configs(validate_recipe({**TINY, "speedups": configs}).speedups)


def test_the_run_chooses_the_strategy_from_the_recipe_processes_and_device():
    two = World(rank=0, size=2)
    assert type(choose("ddp", World(), CPU)) is Strategy and type(choose("fsdp", World(), CPU)) is Strategy
    assert isinstance(choose("ddp", two, CPU), DataParallel) and isinstance(choose("fsdp", two, CPU), FullyShard)
    with pytest.raises(AccelError, match="strategy: fsdp shards"):
        choose("fsdp", World(), torch.device("xla"))


def test_amp_builds_the_precision_any_strategy_runs_with():
    assert isinstance(Amp(Amp.Config(dtype="bf16")).precision(), Autocast)
    assert isinstance(Amp(Amp.Config(dtype="fp16")).precision(), ScaledFp16)
    strategy = DataParallel()
    assert type(strategy.precision) is Precision  # fp32 until a speed-up gives one
    bf16 = Amp(Amp.Config(dtype="bf16")).precision()
    strategy.use(bf16, CPU)
    assert strategy.precision is bf16 and bf16.name == "bf16"


def test_fp16_on_the_xla_strategy_is_skipped_with_why(monkeypatch):
    from accel import devices

    monkeypatch.setattr(devices, "supports_fp16_scaler", lambda device: True)  # not the device's reason
    amp = Amp(Amp.Config(dtype="fp16"))
    active, skipped = resolve([amp], CPU, Xla(CPU))
    assert active == [] and "xm.optimizer_step" in skipped["amp"] and "bf16" in skipped["amp"]
    assert resolve([amp], CPU, Strategy())[0] == [amp]  # the same precision runs under the plain strategy


def test_setup_runs_phase_by_phase_then_by_name_with_the_strategy_in_wrap():
    speedups = built(
        compile={"backend": "eager"},
        ema={},
        amp={},
        optim={},
        attention={"backend": "math"},
        channels_last={},
        threads={},
        cudnn={},
    )
    order = setup_order([*speedups, DataParallel()])
    assert [p.name for p in order] == [
        "cudnn",
        "threads",
        "channels_last",
        "attention",
        "optim",
        "amp",
        "ema",
        "ddp",
        "compile",
    ]
    assert [p.phase for p in order] == sorted(p.phase for p in order) and order[-2].phase is Phase.WRAP


def test_a_conflict_with_the_recipes_own_choices_refuses_and_one_with_the_device_skips():
    speedups = built(jit={}, compile={"backend": "eager"}, float8={})
    active, skipped = resolve(speedups, CPU, Strategy())
    assert [s.name for s in active] == ["compile", "jit"] and "CUDA" in skipped["float8"]  # the device: a skip
    problems = refusals(active, CPU, Strategy())
    assert len(problems) == 2 and all("`jit` and `compile`" in p or "`compile` and `jit`" in p for p in problems)
    assert refusals(built(channels_last={}), CPU, Strategy()) == []
    assert "contiguous" in refusals(built(channels_last={}), CPU, FullyShard())[0]  # the recipe's strategy
