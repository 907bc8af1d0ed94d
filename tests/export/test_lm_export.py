"""A language model exports to ONNX with a dynamic batch: token ids in, logits per position out, checked by
onnxruntime against PyTorch on the validation set; dict-batch (Hugging Face layout) runs are refused."""

from __future__ import annotations

import pytest
import yaml

from accel.config.recipe import validate_recipe
from accel.export import ExportConfig, export_run
from accel.export.errors import ExportError
from accel.export.source import load_source
from accel.runs.records import read_summary
from accel.train.run import run_recipe

from .conftest import QUICK

LM = {
    "name": "lm-export",
    "seed": 0,
    "task": "language_model",
    "model": {"name": "gpt", "args": {"width": 16, "depth": 1, "heads": 2}},
    "data": {"dataset": {"name": "text_files", "context": 16, "val_fraction": 0.2}, "batch_size": 8},
    "optim": {"name": "adamw", "lr": 3e-3},
    "train": {"max_steps": 6},
    "device": "cpu",
    "log": {"progress": False, "tensorboard": False, "every_steps": 2},
}


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    text = tmp_path_factory.mktemp("text")
    (text / "a.py").write_text("def f(x):\n    return x + 1\n" * 60)
    recipe = LM | {"data": LM["data"] | {"dataset": LM["data"]["dataset"] | {"root": str(text)}}}
    out = tmp_path_factory.mktemp("run")
    run_recipe(validate_recipe(recipe), out=out)
    return out


@pytest.mark.slow
def test_a_language_model_exports_to_onnx_and_matches_pytorch(lm_run):
    report = export_run(lm_run, ExportConfig(**QUICK | {"batch_size": 4}))
    assert report["verified"] and report["input"]["name"] == "tokens" and report["input"]["shape"] == ["batch", 16]
    assert report["output"]["shape"] == ["batch", 16, 256]
    rows = {v["name"]: v for v in report["variants"]}
    # next-token accuracy of the exported graph equals PyTorch's and the run's own evaluation
    assert rows["onnx"]["val_accuracy"] == rows["eager"]["val_accuracy"]
    summary = read_summary(lm_run / "summary.json")
    assert rows["eager"]["val_accuracy"] == pytest.approx(summary.metrics["val_accuracy"], abs=1e-6)
    assert set(rows["onnx"]["latency"]) == {"batch_1", "batch_4"}


def test_a_dict_batch_language_model_is_refused_with_where_its_weights_are(lm_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(lm_run, run)
    recipe = yaml.safe_load((run / "recipe.yaml").read_text())
    recipe["data"]["dataset"]["layout"] = "hf"
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    with pytest.raises(ExportError, match=r"dict batches \(`layout: hf`\).*Its weights are in .*last\.pt"):
        load_source(run)
