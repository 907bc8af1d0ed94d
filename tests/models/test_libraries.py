"""Models by library name: `timm:NAME` (the `timm` extra) and `torchvision:NAME`, built with nothing downloaded."""

from __future__ import annotations

import sys

import pytest
import torch

from accel.errors import AccelError
from accel.models import ModelConfig, build_model
from conftest import run_cli

timm = pytest.importorskip("timm", reason="the `timm` extra is not installed")


def test_a_timm_model_takes_the_datas_classes_and_channels():
    model = build_model(ModelConfig(name="timm:resnet18"), num_classes=10, in_channels=1)
    assert model.get_classifier().out_features == 10 and model.conv1.in_channels == 1
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 10)


def test_a_timm_vit_takes_its_options_from_args():
    model = build_model(
        ModelConfig(name="timm:vit_tiny_patch16_224", args={"img_size": 32, "depth": 2}), num_classes=10, in_channels=3
    )
    assert len(model.blocks) == 2 and model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_a_misspelt_timm_name_lists_the_close_ones():
    with pytest.raises(AccelError) as err:
        build_model(ModelConfig(name="timm:resnt18"), num_classes=10, in_channels=3)
    message = str(err.value)
    assert "Unknown timm model `resnt18`" in message and "resnet18" in message and "timm.list_models()" in message


def test_timm_never_downloads_weights():
    with pytest.raises(AccelError, match="model.weights"):
        build_model(ModelConfig(name="timm:resnet18", args={"pretrained": True}), num_classes=10, in_channels=3)


def test_without_timm_the_message_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # `import timm` raises ImportError
    with pytest.raises(AccelError, match=r"pip install 'accel\[timm\]'"):
        build_model(ModelConfig(name="timm:resnet18"), num_classes=10, in_channels=3)


def test_a_misspelt_torchvision_name_lists_the_close_ones():
    with pytest.raises(AccelError, match="Close names: .*resnet18"):
        build_model(ModelConfig(name="torchvision:resnet19"), num_classes=10, in_channels=3)


@pytest.mark.slow
def test_accel_train_builds_a_timm_model_by_name(tiny, write_recipe, tmp_path):
    tiny["model"] = {"name": "timm:resnet18"}
    tiny["data"]["dataset"]["shape"] = [3, 16, 16]
    tiny["train"] = {"max_steps": 2}
    result = run_cli("train", write_recipe(tiny), "--out", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert "timm:resnet18" in (tmp_path / "run" / "recipe.yaml").read_text()
    assert (tmp_path / "run" / "checkpoints" / "last.pt").is_file()


@pytest.mark.slow
def test_accel_train_with_a_misspelt_timm_name_exits_2_listing_close_names(tiny, write_recipe, tmp_path):
    tiny["model"] = {"name": "timm:resnet1B"}
    result = run_cli("train", write_recipe(tiny), "--out", tmp_path / "run")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Unknown timm model `resnet1B`" in result.stderr and "resnet18" in result.stderr


def test_timm_args_override_what_the_data_says():
    model = build_model(
        ModelConfig(name="timm:resnet18", args={"num_classes": 0, "in_chans": 3}), num_classes=10, in_channels=1
    )
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 512)  # features: no classifier
