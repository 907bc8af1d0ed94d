"""A tiny trained run shared by the export tests (trained once per session), and its ONNX export."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from accel.export import ExportConfig, export_run
from accel.recipe import validate_recipe
from accel.run import run_recipe

# the conftest's tiny recipe, with enough validation samples (40) for accuracy to mean something
RECIPE = {
    "name": "export-tiny",
    "seed": 0,
    "model": {"name": "small_cnn", "args": {"width": 4}},
    "data": {"dataset": {"name": "synthetic", "shape": [1, 8, 8], "num_samples": 200, "num_classes": 4},
             "batch_size": 16},
    "optim": {"name": "adamw", "lr": 0.01},
    "train": {"epochs": 2},
    "device": "cpu",
    "log": {"progress": False, "tensorboard": False, "every_steps": 5},
}
QUICK = {"runs": 3, "warmup": 1, "batch_size": 32}  # measurement settings that only check the plumbing


@pytest.fixture(scope="session")
def recipe_data() -> dict:
    return copy.deepcopy(RECIPE)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A run directory with recipe.yaml, checkpoints/last.pt and summary.json."""
    out = tmp_path_factory.mktemp("run")
    run_recipe(validate_recipe(copy.deepcopy(RECIPE)), out=out)
    return out


@pytest.fixture(scope="session")
def onnx_report(tiny_run) -> dict:
    """export.json of `accel export RUN --quantize dynamic-int8 --quantize static-int8`, measured quickly."""
    return export_run(tiny_run, ExportConfig(quantize=["dynamic-int8", "static-int8"], **QUICK))
