"""The engine's per-step path stays short: the Python calls into accel's files in one optimizer step of a
hand-written loop, counted (a count does not move with the machine, as a wall clock does on 2 busy cores). The
figures and their wall-clock side: benchmarks/engine_step_cost.py, docs/benchmarks.md. A new call on this path
must be worth its cost on a launch-bound GPU step: raise the bound here and say why at the call."""

from __future__ import annotations

import sys

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from engine_step_cost import accel_calls, gpt_steps, linear_steps  # noqa: E402

# an fp32 step without speed-ups: the loop's forward (the engine's forward is the model's `__call__`; counting),
# eng.autocast(), eng.backward (the tensor's own backward), optimizer.step() (the optimizer's own in fp32),
# zero_grad; a profile's phases and the strategy's no_sync only where they exist
BOUNDS = {"linear": (linear_steps, 11), "gpt": (gpt_steps, 18)}  # the GPT step: two micro-batches


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BOUNDS))
def test_a_steps_calls_into_accel_stay_few(name):
    build, bound = BOUNDS[name]
    torch.manual_seed(0)
    step = build()["engine"]
    for _ in range(3):  # the first step's own work (the speed lint, throughput's start) is done once
        step()
    calls, top = accel_calls(step, 4)
    assert calls <= bound, f"{calls} calls into accel a step (at most {bound}): {top}"
    assert calls >= 10  # the count sees the engine's path at all
