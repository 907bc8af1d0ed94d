"""Registries and import strings: every command names the user code a recipe makes it import."""

from __future__ import annotations

import logging

import pytest
import yaml

from accel import registry
from accel.cli import main

MODULE = """
from accel.models import small_cnn


def build(num_classes, in_channels):
    return small_cnn(num_classes=num_classes, in_channels=in_channels, width=2)


def loss(model, batch):
    images, labels = batch
    return model(images).logsumexp(1).mean() - model(images).gather(1, labels[:, None]).mean()
"""
SAID = "importing user code: user_code_mod:build (model), user_code_mod:loss (task)"


@pytest.fixture
def user_recipe(tiny, tmp_path, monkeypatch):
    (tmp_path / "user_code_mod.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_announced", set())
    tiny["model"] = {"name": "user_code_mod:build"}
    tiny["task"] = {"name": "user_code_mod:loss"}
    tiny["train"]["epochs"] = 1
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(tiny))
    return path


def _said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("importing user code")]


@pytest.mark.parametrize(
    "command, code",
    [
        (["train", "{recipe}", "--out", "{tmp}/run", "--set", "train.max_steps=1"], 0),
        (["bench", "{recipe}", "--vary", "data.batch_size=8,16", "--list"], 0),
        (["tune", "{recipe}", "--batch-sizes=", "--workers=", "--threads=", "--no-speedups"], 2),  # nothing to tune
        (["cache", "build", "{recipe}"], 2),  # the data is in memory: nothing to cache
    ],
)
def test_each_command_names_the_user_code_it_imports(command, code, user_recipe, caplog):
    caplog.set_level(logging.INFO, logger="accel")
    assert main([part.format(recipe=user_recipe, tmp=user_recipe.parent) for part in command]) == code
    assert _said(caplog) == [SAID]  # once, however often the command reads the recipe


def test_export_names_the_user_code_of_the_run_directory(user_recipe, caplog, capsys):
    run = user_recipe.parent / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.pt").write_bytes(b"")
    (run / "recipe.yaml").write_text(user_recipe.read_text())
    caplog.set_level(logging.INFO, logger="accel")
    assert main(["export", str(run)]) == 2  # the empty checkpoint is refused after the recipe was read
    assert _said(caplog) == [SAID]


@pytest.mark.parametrize("model", ["torchvision:resnet18", "timm:test_resnet"])
def test_a_recipe_of_builtins_names_no_user_code(model, tiny, write_recipe, caplog, monkeypatch):
    monkeypatch.setattr(registry, "_announced", set())
    tiny["model"] = {"name": model}
    caplog.set_level(logging.INFO, logger="accel")
    main(["bench", str(write_recipe(tiny)), "--vary", "data.batch_size=8,16", "--list"])
    assert _said(caplog) == []


def test_a_dataset_of_the_users_is_named_too(tiny, caplog, monkeypatch):
    monkeypatch.setattr(registry, "_announced", set())
    caplog.set_level(logging.INFO, logger="accel")
    registry.announce_user_code({"model": "small_cnn", "dataset": "tests.compat.data:token_classes"})
    assert _said(caplog) == ["importing user code: tests.compat.data:token_classes (dataset)"]
