"""A tiny trained run shared by the export tests (trained once per session), and its ONNX export."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from accel.config.recipe import validate_recipe
from accel.export import ExportConfig, export_run
from accel.train.run import run_recipe
from conftest import TINY

# the shared tiny recipe, with enough validation samples (40) for accuracy to mean something
RECIPE = copy.deepcopy(TINY) | {"name": "export-tiny", "optim": {"name": "adamw", "lr": 0.01}}
RECIPE["data"]["dataset"]["num_samples"] = 200
RECIPE["log"]["every_steps"] = 5
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
