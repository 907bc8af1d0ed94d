"""The real quickstart model (small CNN, 1000 real MNIST validation digits) exported to ONNX: onnxruntime must give
the same validation accuracy exactly and every logit within 1e-4."""

from __future__ import annotations

import pytest

from accel.config.recipe import load_recipe
from accel.config.shipped import RECIPES_DIR
from accel.data.datasets.mnist import locate_mnist5k
from accel.errors import DataError
from accel.export import ExportConfig, export_run
from accel.train.run import run_recipe


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory):
    try:
        locate_mnist5k(None)
    except DataError as err:
        pytest.skip(f"the quickstart's data is not installed here: {err}")
    # the first 10 steps of epoch 1: enough to move the weights far from initialisation in a few seconds here
    # (a whole epoch took about 30 s on the busy 2-core build machine)
    recipe = load_recipe(
        RECIPES_DIR / "quickstart.yaml", ["train.max_steps=10", "log.progress=false", "log.tensorboard=false"]
    )
    out = tmp_path_factory.mktemp("quickstart")
    run_recipe(recipe, out=out)
    return out


@pytest.mark.slow
def test_onnxruntime_reproduces_the_quickstart_accuracy_exactly_and_logits_within_1e_4(quickstart_run):
    report = export_run(quickstart_run, ExportConfig(format="onnx", runs=2, warmup=0, batch_size=64))
    eager, onnx = report["variants"]
    assert report["validation"]["samples"] == 1000
    assert eager["val_accuracy"] == report["validation"]["accuracy_reported_by_training"] > 0.2
    assert onnx["val_accuracy"] == eager["val_accuracy"]
    assert onnx["max_abs_diff"] <= 1e-4 and report["verified"]
    assert report["input"] == {
        "name": "images",
        "dtype": "uint8",
        "shape": ["batch", 1, 28, 28],
        "normalisation": "inside the graph: (images / 255 - mean) / std",
        "mean": [0.1307],
        "std": [0.3081],
    }
