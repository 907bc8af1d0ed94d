"""`model.weights`: pretrained weights from a local file, read safely, strict by default, the classifier head
re-initialised when the class count differs. Every file here is written by the test itself: nothing downloads."""

from __future__ import annotations

import logging

import pytest
import torch
import torchvision
from safetensors.torch import save_file

from accel.config.recipe import validate_recipe
from accel.errors import AccelError, RecipeError
from accel.models import ModelConfig, build_model
from accel.train.run import run_recipe
from conftest import run_cli


def _build(name: str, weights=None, num_classes: int = 10, **args) -> torch.nn.Module:
    cfg = ModelConfig(name=name, args=args, weights=weights)
    return build_model(cfg, num_classes=num_classes, in_channels=3).eval()


def _same_outputs(a: torch.nn.Module, b: torch.nn.Module, size: int = 32) -> bool:
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        return torch.equal(a.eval()(x), b.eval()(x))


def _backbone(model: torch.nn.Module, head: str) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.state_dict().items() if not k.startswith(head + ".")}


def test_torchvision_weights_load_exactly(tmp_path):
    torch.manual_seed(0)
    saved = torchvision.models.resnet18(num_classes=10)
    torch.save(saved.state_dict(), tmp_path / "resnet18.pth")
    assert _same_outputs(_build("torchvision:resnet18", str(tmp_path / "resnet18.pth")), saved)


def test_a_1000_class_head_is_reinitialised_for_10_classes_with_a_note(tmp_path, caplog):
    torch.manual_seed(0)
    imagenet = torchvision.models.resnet18()  # 1000 classes
    torch.save({"epoch": 90, "state_dict": imagenet.state_dict()}, tmp_path / "imagenet.pt")
    with caplog.at_level(logging.INFO, logger="accel"):
        model = _build("torchvision:resnet18", str(tmp_path / "imagenet.pt"))
    assert "head re-initialised: 1000 -> 10 classes (fc.weight, fc.bias not loaded)" in caplog.text
    backbone = _backbone(imagenet, "fc")
    assert all(torch.equal(model.state_dict()[k], v) for k, v in backbone.items())
    assert model.fc.out_features == 10


def test_timm_weights_from_safetensors_load_exactly(tmp_path):
    pytest.importorskip("timm", reason="the `timm` extra is not installed")
    saved = _build("timm:resnet18")
    save_file(saved.state_dict(), tmp_path / "resnet18.safetensors")
    loaded = _build("timm:resnet18", {"path": str(tmp_path / "resnet18.safetensors"), "strict": True})
    assert _same_outputs(loaded, saved)


def test_a_timm_vit_gets_its_backbone_and_a_new_head(tmp_path, caplog):
    pytest.importorskip("timm", reason="the `timm` extra is not installed")
    vit = {"img_size": 32, "depth": 2}
    imagenet = _build("timm:vit_tiny_patch16_224", num_classes=1000, **vit)
    torch.save(imagenet.state_dict(), tmp_path / "vit.pth")
    with caplog.at_level(logging.INFO, logger="accel"):
        model = _build("timm:vit_tiny_patch16_224", str(tmp_path / "vit.pth"), **vit)
    assert "head re-initialised: 1000 -> 10 classes" in caplog.text
    assert all(torch.equal(model.state_dict()[k], v) for k, v in _backbone(imagenet, "head").items())


def test_a_headless_backbone_loads_strictly_and_keeps_the_built_head(tmp_path, caplog):
    pytest.importorskip("timm", reason="the `timm` extra is not installed")
    backbone = _build("timm:resnet18")
    backbone.reset_classifier(0)
    torch.save(backbone.state_dict(), tmp_path / "features.pt")
    with caplog.at_level(logging.INFO, logger="accel"):
        _build("timm:resnet18", str(tmp_path / "features.pt"))
    assert "head initialised: the file has no fc.weight, fc.bias" in caplog.text


def test_accels_own_checkpoint_loads_its_trained_weights(tiny, tmp_path):
    run_recipe(validate_recipe({**tiny, "train": {"max_steps": 2}}), out=tmp_path / "run")
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    model = build_model(ModelConfig(**tiny["model"], weights=str(last)), num_classes=4, in_channels=1)
    trained = torch.load(last, weights_only=True)["model"]
    assert all(torch.equal(model.state_dict()[k], v) for k, v in trained.items())


def test_keys_saved_from_a_ddp_wrapped_model_are_unwrapped(tmp_path):
    saved = torchvision.models.resnet18(num_classes=10)
    torch.save({f"module.{k}": v for k, v in saved.state_dict().items()}, tmp_path / "ddp.pt")
    assert _same_outputs(_build("torchvision:resnet18", str(tmp_path / "ddp.pt")), saved)


def test_weights_of_another_model_fail_strictly_listing_the_keys(tmp_path, caplog):
    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), tmp_path / "resnet18.pt")
    with pytest.raises(AccelError) as err:
        _build("torchvision:resnet34", str(tmp_path / "resnet18.pt"))
    message = str(err.value)
    assert "does not fit the model (ResNet)" in message and "missing from the file: layer1.2.conv1.weight" in message
    assert "more)" in message and "`model.weights.strict: false`" in message
    with caplog.at_level(logging.WARNING, logger="accel"):
        model = _build("torchvision:resnet34", {"path": str(tmp_path / "resnet18.pt"), "strict": False})
    assert "not loaded (strict: false)" in caplog.text
    assert torch.equal(model.conv1.weight, torch.load(tmp_path / "resnet18.pt")["conv1.weight"])


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(AccelError, match=f"no file at {tmp_path / 'nope.pt'}"):
        _build("torchvision:resnet18", str(tmp_path / "nope.pt"))


def test_a_pickled_model_is_refused_unread(tmp_path):
    torch.save(torchvision.models.resnet18(num_classes=10), tmp_path / "whole.pt")
    with pytest.raises(AccelError, match=r"weights_only=True.*Save `model.state_dict\(\)`"):
        _build("torchvision:resnet18", str(tmp_path / "whole.pt"))


def test_a_recipe_takes_a_path_or_a_mapping_and_rejects_a_misspelt_key(tiny):
    recipe = validate_recipe({**tiny, "model": {"name": "small_cnn", "weights": "w.pt"}})
    assert recipe.dump()["model"]["weights"] == {"path": "w.pt", "strict": True}
    with pytest.raises(RecipeError, match="`model.weights.strickt` is not a valid key"):
        validate_recipe({**tiny, "model": {"name": "small_cnn", "weights": {"path": "w.pt", "strickt": False}}})


@pytest.mark.slow
def test_accel_train_fine_tunes_from_local_weights(tiny, write_recipe, tmp_path):
    torch.save(torchvision.models.resnet18().state_dict(), tmp_path / "imagenet.pth")
    tiny["model"] = {"name": "torchvision:resnet18", "weights": str(tmp_path / "imagenet.pth")}
    tiny["data"]["dataset"]["shape"] = [3, 16, 16]
    tiny["train"] = {"max_steps": 2}
    tiny["speedups"] = {"channels_last": True}
    result = run_cli("train", write_recipe(tiny), "--out", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert "head re-initialised: 1000 -> 4 classes" in result.stderr
    assert f"loaded 120 of the model's 122 tensors from {tmp_path / 'imagenet.pth'}" in result.stderr


def test_a_resume_takes_the_weights_from_its_checkpoint_not_the_pretrained_file(tiny, tmp_path):
    pretrained = tmp_path / "pretrained.pt"
    torch.save(build_model(ModelConfig(**tiny["model"]), num_classes=4, in_channels=1).state_dict(), pretrained)
    recipe = {**tiny, "model": {**tiny["model"], "weights": str(pretrained)}, "train": {"epochs": 1}}
    run_recipe(validate_recipe(recipe), out=tmp_path / "run")
    pretrained.unlink()  # gone since: the checkpoint has what the run needs
    summary = run_recipe(validate_recipe({**recipe, "train": {"epochs": 2}}), out=tmp_path / "run", resume=True)
    assert summary["status"] == "completed" and summary["epochs"] == 2
