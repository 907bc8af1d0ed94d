"""cudnn: the flags it sets while training, the conflict it refuses, and an exact restore afterwards."""

from __future__ import annotations

import pytest
import torch

from accel.callbacks import Callback
from accel.config.recipe import validate_recipe
from accel.errors import RecipeError
from accel.speedups.cudnn import Cudnn, apply_flags, read_flags, requested_flags, restore_flags
from conftest import cuda_only

from .conftest import RECIPE


class FlagsDuringTraining(Callback):
    """Reads the global flags at the first batch, i.e. after every speed-up's setup."""

    def __init__(self):
        self.flags: dict | None = None

    def on_batch_end(self, trainer, info) -> None:
        if self.flags is None:
            self.flags = read_flags()


@pytest.mark.parametrize(
    "cfg, expected",
    [
        (
            {"benchmark": True, "allow_tf32": False},
            {
                "cudnn.benchmark": True,
                "cudnn.deterministic": False,
                "cudnn.allow_tf32": False,
                "float32_matmul_precision": "highest",
            },
        ),
        ({}, {"cudnn.benchmark": True, "cudnn.allow_tf32": True, "float32_matmul_precision": "high"}),
        (
            {"deterministic": True, "float32_matmul_precision": "medium"},
            {"cudnn.benchmark": False, "cudnn.deterministic": True, "float32_matmul_precision": "medium"},
        ),
    ],
)
def test_flags_are_set_while_training_and_restored_after(make_trainer, cfg, expected):
    before = read_flags()
    trainer = make_trainer({"cudnn": cfg})
    seen = FlagsDuringTraining()
    trainer.callbacks.append(seen)
    trainer.fit()
    assert {name: seen.flags[name] for name in expected} == expected
    assert read_flags() == before


def test_benchmark_follows_deterministic_unless_set():
    assert requested_flags(Cudnn.Config())["cudnn.benchmark"] is True
    deterministic = requested_flags(Cudnn.Config(deterministic=True))
    assert deterministic["cudnn.benchmark"] is False and deterministic["cudnn.deterministic"] is True
    assert requested_flags(Cudnn.Config(allow_tf32=False))["float32_matmul_precision"] == "highest"
    medium = Cudnn.Config(allow_tf32=False, float32_matmul_precision="medium")
    assert requested_flags(medium)["float32_matmul_precision"] == "medium"  # set: wins over allow_tf32


def test_benchmark_with_deterministic_is_an_error_that_explains_the_trade_off():
    with pytest.raises(RecipeError, match=r"speedups\.cudnn.*conflict.*Choose speed.*or reproducibility"):
        validate_recipe({**RECIPE, "speedups": {"cudnn": {"benchmark": True, "deterministic": True}}})
    validate_recipe({**RECIPE, "speedups": {"cudnn": {"benchmark": False, "deterministic": True}}})


@pytest.mark.parametrize("start", ["highest", "high", "medium"])
@pytest.mark.parametrize(
    "cfg", [{}, {"allow_tf32": False}, {"deterministic": True, "float32_matmul_precision": "medium"}]
)
def test_restore_is_exact_whatever_the_starting_precision(start, cfg):
    torch.set_float32_matmul_precision(start)  # the autouse fixture puts the original back
    before = read_flags()
    previous = apply_flags(requested_flags(Cudnn.Config(**cfg)))
    assert torch.get_float32_matmul_precision() and torch.backends.cudnn.allow_tf32 in (True, False)  # readable
    restore_flags(previous)
    assert read_flags() == before
    assert torch.backends.cuda.matmul.allow_tf32 == (start != "highest")


def test_a_second_fit_restores_the_original_flags_not_its_own(make_trainer):
    before = read_flags()
    trainer = make_trainer({"cudnn": {"float32_matmul_precision": "medium"}})
    trainer.fit()
    trainer.cfg.max_steps = 3
    trainer.fit()
    assert read_flags() == before


@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="this CPU has no bf16 matmul in oneDNN")
def test_medium_matmul_precision_changes_cpu_matmuls_until_teardown():
    a, b = torch.randn(2, 256, 256, generator=torch.Generator().manual_seed(0))
    full = a @ b
    speedup = Cudnn(Cudnn.Config(float32_matmul_precision="medium"))
    speedup.setup(type("T", (), {"device": torch.device("cpu")})())
    try:
        reduced = a @ b  # oneDNN's bf16 path: faster, with bf16's rounding error
    finally:
        speedup.teardown()
    assert not torch.equal(reduced, full)
    # bf16 keeps 8 bits of mantissa: about 0.2-0.3% relative error over the whole product (AMX: plain bf16)
    assert ((reduced - full).norm() / full.norm()).item() < 1e-2
    assert torch.equal(a @ b, full)


@cuda_only
def test_tf32_changes_cuda_matmuls():
    a = torch.randn(512, 512, device="cuda")
    exact = a.double() @ a.double()
    with_tf32 = Cudnn(Cudnn.Config(allow_tf32=True, float32_matmul_precision="high"))
    without = Cudnn(Cudnn.Config(allow_tf32=False, float32_matmul_precision="highest"))
    errors = []
    for speedup in (without, with_tf32):
        speedup.setup(type("T", (), {"device": torch.device("cuda")})())
        try:
            errors.append(((a @ a) - exact).abs().max().item())
        finally:
            speedup.teardown()
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("TF32 needs an Ampere or newer GPU")
    assert errors[1] > 10 * errors[0]
