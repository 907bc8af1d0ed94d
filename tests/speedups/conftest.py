"""Tiny trainers for the speed-up tests: a small CNN on synthetic [3, 16, 16] images, batch 8, on the CPU."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
import torch

from accel.config.recipe import validate_recipe
from accel.train.run import build_trainer
from accel.train.trainer import Trainer

RECIPE: dict[str, Any] = {
    "name": "speedup-test",
    "seed": 0,
    "model": {"name": "small_cnn", "args": {"width": 8}},
    "data": {
        "dataset": {
            "name": "synthetic",
            "shape": [3, 16, 16],
            "num_samples": 40,
            "num_classes": 4,
            "val_fraction": 0.2,
        },
        "batch_size": 8,
        "loader": {"num_workers": 0},
    },
    "optim": {"name": "adamw", "lr": 1e-2},
    "train": {"max_steps": 2},
    "device": "cpu",
    "log": {"progress": False, "tensorboard": False},
}


def _merge(base: dict, changes: dict) -> dict:
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def tiny_trainer(speedups: dict[str, Any] | None = None, **sections: Any) -> Trainer:
    """A Trainer (not yet fitted, no run directory) for RECIPE with `speedups` and `sections` merged in."""
    data = _merge(copy.deepcopy(RECIPE), copy.deepcopy(sections))
    data["speedups"] = copy.deepcopy(speedups or {})
    return build_trainer(validate_recipe(data))


@pytest.fixture
def make_trainer():
    """`make_trainer(speedups, train={...}, ...)` -> a tiny Trainer; see `tiny_trainer`."""
    return tiny_trainer


def weights(trainer: Trainer) -> list[torch.Tensor]:
    return [t.detach().clone() for t in trainer.module.state_dict().values()]


def _precision_leaves() -> dict[str, Any]:
    b = torch.backends
    leaves = {
        "cuda.matmul": b.cuda.matmul,
        "mkldnn.matmul": getattr(b.mkldnn, "matmul", None),
        "cudnn.conv": getattr(b.cudnn, "conv", None),
        "cudnn.rnn": getattr(b.cudnn, "rnn", None),
    }
    return {f"{name}.fp32_precision": getattr(obj, "fp32_precision", None) for name, obj in leaves.items()}


def global_state() -> dict[str, Any]:
    """Process-global settings a speed-up might change and must restore on teardown."""
    import torch._dynamo  # imported here, not at collection: it takes seconds

    b = torch.backends
    return {
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "cudnn": (b.cudnn.enabled, b.cudnn.benchmark, b.cudnn.deterministic, b.cudnn.allow_tf32),
        "matmul_tf32": b.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        **_precision_leaves(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "autocast": {d: torch.is_autocast_enabled(d) for d in ("cpu", "cuda")},
        "grad_enabled": torch.is_grad_enabled(),
        "default_dtype": torch.get_default_dtype(),
        "env": dict(os.environ),
        "dynamo": torch._dynamo.config.get_config_copy(),
    }


@pytest.fixture(autouse=True)
def _isolate_globals():
    """A safety net: whatever a failing test left behind (threads, precision) does not leak into the next."""
    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    cudnn = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    yield
    torch.set_num_threads(threads)
    torch.set_float32_matmul_precision(precision)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn
