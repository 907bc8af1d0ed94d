"""Every shipped recipe and preset validates against the speed-ups that exist; the ResNet-18 recipe trains."""

from __future__ import annotations

import math

import pytest
import yaml

from accel.config.recipe import load_recipe
from accel.config.shipped import CONFIGS_DIR, RECIPES_DIR
from accel.train.run import build_trainer

RECIPES = sorted(RECIPES_DIR.glob("*.yaml"))
PRESETS = sorted(CONFIGS_DIR.glob("*.yaml"))


def test_the_shipped_files_are_found():
    names = {p.name for p in RECIPES + PRESETS}
    assert {"cifar10-resnet18.yaml", "fast-cpu.yaml", "fast-cuda.yaml"} <= names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_recipe_validates(path):
    load_recipe(path)  # raises RecipeError, naming file and line, on any problem


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_preset_validates_under_a_recipe(path, tiny, write_recipe):
    """A preset is a fragment: it validates as the `base:` of a minimal recipe (its speed-up names and options
    must match the speed-ups' own Config classes)."""
    recipe = load_recipe(write_recipe({"base": str(path), **tiny}))
    assert set(recipe.speedups) == set((yaml.safe_load(path.read_text()) or {}).get("speedups", {}))


def test_fast_presets_hold_the_measured_combinations():
    cpu, cuda = (
        yaml.safe_load((CONFIGS_DIR / name).read_text())["speedups"] for name in ("fast-cpu.yaml", "fast-cuda.yaml")
    )
    assert cpu == {"amp": {"dtype": "bf16"}, "channels_last": {}, "compile": {}}
    assert {"cudnn", "amp", "channels_last", "compile", "optim"} <= set(cuda)
    assert cuda["optim"]["impl"] == "fused" and cuda["cudnn"]["benchmark"] and cuda["cudnn"]["allow_tf32"]


def test_resnet_recipe_inherits_the_cpu_preset_and_its_shape():
    recipe = load_recipe("cifar10-resnet18")
    assert recipe.model.name == "resnet18_cifar" and recipe.data.batch_size == 128
    assert recipe.data.dataset.name == "synthetic" and recipe.data.dataset.shape == [3, 32, 32]
    assert recipe.data.dataset.num_classes == 10
    assert recipe.optim.name == "sgd" and recipe.optim.nesterov and recipe.schedule.name == "onecycle"
    assert set(recipe.speedups) == {"amp", "channels_last", "compile"}


@pytest.mark.slow
def test_resnet_recipe_trains_two_steps():
    # eager backend: dynamo still captures the whole ResNet, without inductor's 30 s of code generation
    overrides = [
        "train.max_steps=2",
        "data.batch_size=4",
        "data.dataset.num_samples=20",
        "device=cpu",
        "speedups.compile.backend=eager",
        "log.progress=false",
        "log.tensorboard=false",
    ]
    recipe = load_recipe("cifar10-resnet18", overrides)
    trainer = build_trainer(recipe)
    summary = trainer.fit()
    assert summary["status"] == "completed" and summary["steps"] == 2
    assert math.isfinite(summary["metrics"]["train_loss"]) and math.isfinite(summary["metrics"]["val_loss"])
    assert summary["speedups"] == ["channels_last", "amp", "compile"]  # none skipped on a CPU


@pytest.mark.slow
def test_lm_recipe_trains_a_few_steps_on_the_standard_library():
    # amp off: the tests let bf16 run on any CPU, and where it is emulated it makes this minutes instead of seconds
    overrides = [
        "train.max_steps=3",
        "data.dataset.val_fraction=0.01",
        "speedups.amp.enabled=false",
        "log.progress=false",
        "log.tensorboard=false",
    ]
    recipe = load_recipe("lm-bytes", overrides)
    assert recipe.task.name == "language_model" and recipe.data.dataset.root == "stdlib"
    trainer = build_trainer(recipe)
    assert sum(p.numel() for p in trainer.module.parameters()) == 1_846_656  # the 1.9M-parameter GPT of the docs
    summary = trainer.fit()
    assert summary["status"] == "completed" and summary["tokens_per_s"] > 0
    assert 2.0 < summary["metrics"]["val_loss"] < math.log(256)  # below uniform bytes, far from trained
