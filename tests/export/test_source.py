"""Loading a run for export: what the exported graph takes, and the errors for runs that cannot be exported."""

from __future__ import annotations

import shutil

import pytest
import torch
import yaml

from accel.config.recipe import validate_recipe
from accel.errors import CheckpointError
from accel.export.errors import ExportError
from accel.export.formats import eager_runner
from accel.export.measure import evaluate
from accel.export.source import ImageClassifier, load_source, locate
from accel.runs.records import read_summary
from accel.train.run import run_recipe


def test_exported_module_takes_loader_images_and_reproduces_training_evaluation(tiny_run):
    source = load_source(tiny_run)
    classifier = source.servable()
    images, _ = next(iter(source.val_loader))
    assert images.dtype == torch.uint8 and source.example.dtype == torch.uint8 and len(source.example) == 2
    normalised = (images.float() / 255 - torch.tensor(source.mean).view(1, -1, 1, 1)) / torch.tensor(source.std).view(
        1, -1, 1, 1
    )
    with torch.no_grad():
        torch.testing.assert_close(classifier(images), source.model(normalised), atol=1e-5, rtol=1e-5)
    summary = read_summary(tiny_run / "summary.json")
    # same weights, same validation data, same normalisation: the accuracy the run reported, to the sample
    assert evaluate(eager_runner(classifier), source.val_loader).accuracy == summary.metrics["val_accuracy"]
    spec = source.input_spec()
    assert spec["dtype"] == "uint8" and spec["shape"] == ["batch", 1, 8, 8] and spec["mean"] == list(source.mean)


def test_float_inputs_pass_through_unnormalised():
    model = torch.nn.Flatten()
    wrapped = ImageClassifier(model, (0.5,), (0.25,), fold_normalize=False)
    x = torch.rand(2, 1, 2, 2)
    assert torch.equal(wrapped(x), x.flatten(1))


def test_a_checkpoint_file_locates_its_run_directory(tiny_run):
    assert locate(tiny_run / "checkpoints" / "last.pt") == (tiny_run, tiny_run / "checkpoints" / "last.pt")
    assert locate(tiny_run) == (tiny_run, tiny_run / "checkpoints" / "last.pt")


def test_run_directory_without_checkpoint_says_what_is_missing(tiny_run, tmp_path):
    shutil.copy(tiny_run / "recipe.yaml", tmp_path / "recipe.yaml")
    with pytest.raises(ExportError, match=r"has no checkpoint .*checkpoints/last.pt is missing"):
        load_source(tmp_path)
    with pytest.raises(ExportError, match="does not exist"):
        load_source(tmp_path / "nowhere")


def test_checkpoint_without_recipe_says_what_is_missing(tiny_run, tmp_path):
    shutil.copy(tiny_run / "checkpoints" / "last.pt", tmp_path / "model.pt")
    with pytest.raises(ExportError, match="No recipe.yaml"):
        load_source(tmp_path / "model.pt")


def test_checkpoint_of_another_model_is_refused(tiny_run, tmp_path, recipe_data):
    shutil.copytree(tiny_run / "checkpoints", tmp_path / "checkpoints")
    changed = {**recipe_data, "model": {"name": "small_cnn", "args": {"width": 8}}}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(changed))
    with pytest.raises(CheckpointError, match="different model"):
        load_source(tmp_path)


@pytest.mark.slow
def test_a_run_that_evaluated_ema_weights_exports_them(recipe_data, tmp_path):
    run_recipe(validate_recipe({**recipe_data, "speedups": {"ema": {"decay": 0.9}}}), out=tmp_path)
    source = load_source(tmp_path)
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)
    shadow, raw = state["speedups"]["ema"]["shadow"], state["model"]
    name = next(k for k in raw if k.endswith("weight"))
    assert source.weights == "ema" and not torch.equal(shadow[name], raw[name])
    assert torch.equal(source.model.state_dict()[name], shadow[name])
    summary = read_summary(tmp_path / "summary.json")
    assert evaluate(eager_runner(source.servable()), source.val_loader).accuracy == summary.metrics["val_accuracy"]


def test_a_run_of_another_task_is_refused_with_where_its_weights_are(tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    recipe = yaml.safe_load((run / "recipe.yaml").read_text())
    recipe["task"] = {"name": "regression", "loss": "mse"}
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    with pytest.raises(
        ExportError,
        match=r"exports image classifiers and language models; .* trained task "
        r"`regression`\. Its weights are in .*last\.pt",
    ):
        load_source(run)
