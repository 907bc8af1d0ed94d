"""Models users bring, trained unchanged: each one through a recipe (what `accel train` runs) and through the
Python `Trainer`, with every speed-up that applies to it; one resumes exactly after SIGKILL.

The models: a GPT written for a minimal trainer (`forward(idx, targets) -> (logits, loss)`, `.view()` inside), a
timm CNN and ViT, a Hugging Face causal LM and sequence classifier built from configs (dict batches, their own
loss), a torchvision ResNet and ViT, and classifiers that return a dict or a dataclass instead of a tensor.
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Trainer
from accel.config.recipe import TrainConfig, validate_recipe
from accel.models import ModelConfig, build_model
from accel.runs.records import read_summary
from accel.tasks import ModelLoss
from accel.train.run import run_recipe
from conftest import ROOT, finish, wait_for_first_checkpoint
from tests.compat import data as compat_data
from tests.compat import models as compat_models

TEXT = {"name": "text_files", "root": "stdlib", "glob": "bisect.py", "context": 16, "val_fraction": 0.25}
IMAGES = {"name": "synthetic", "shape": [3, 16, 16], "num_samples": 48, "num_classes": 4}
CLASSES = {"name": "tests.compat.data:token_classes", "args": {"num_samples": 48}}
GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 16, "n_head": 2}
BERT = {
    "model_type": "bert",
    "num_hidden_layers": 2,
    "hidden_size": 16,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "vocab_size": compat_data.VOCAB,
    "max_position_embeddings": compat_data.LENGTH,
}
TORCHVISION_VIT = {"image_size": 16, "patch_size": 4, "num_layers": 2, "num_heads": 2, "hidden_dim": 16, "mlp_dim": 32}


@dataclass(frozen=True)
class Case:
    model: dict[str, Any]
    data: dict[str, Any]
    speedups: tuple[str, ...]  # those that apply to this model
    task: str | None = None  # default: classification
    kind: str = "images"  # what the Python path feeds it: images, tokens or token_dicts
    args: dict[str, Any] = field(default_factory=dict)


CASES = {
    "view_gpt": Case(
        {"name": "tests.compat.models:build", "args": {"depth": 2}},
        TEXT,
        ("amp", "compile", "activation_checkpointing", "attention"),
        "tests.compat.models:loss",
        "tokens",
    ),
    "timm_cnn": Case({"name": "timm:test_resnet"}, IMAGES, ("amp", "channels_last", "compile")),
    "timm_vit": Case(
        {"name": "timm:test_vit", "args": {"img_size": 16, "patch_size": 4}},
        IMAGES,
        ("amp", "compile", "activation_checkpointing", "attention"),
    ),
    "hf_causal_lm": Case(
        {"name": "hf_causal_lm", "args": GPT2},
        TEXT | {"layout": "hf"},
        ("amp", "compile", "activation_checkpointing", "attention"),
        "model_loss",
        "token_dicts",
    ),
    "hf_sequence_classifier": Case(
        {"name": "hf_sequence_classifier", "args": BERT},
        CLASSES,
        ("amp", "compile", "activation_checkpointing", "attention"),
        "model_loss",
        "class_dicts",
    ),
    "torchvision_resnet": Case({"name": "torchvision:resnet18"}, IMAGES, ("amp", "channels_last", "compile")),
    "torchvision_vit": Case(
        {"name": "torchvision.models:VisionTransformer", "args": TORCHVISION_VIT},
        IMAGES,
        ("amp", "compile", "activation_checkpointing", "attention"),
    ),
    "returns_dict": Case(
        {"name": "tests.compat.models:build_output_cnn", "args": {"returns": "dict"}},
        IMAGES,
        ("amp", "channels_last", "compile"),
    ),
    "returns_dataclass": Case(
        {"name": "tests.compat.models:build_output_cnn", "args": {"returns": "dataclass"}},
        IMAGES,
        ("amp", "channels_last", "compile"),
    ),
}
SPEEDUPS = {
    "amp": {"dtype": "bf16"},
    "channels_last": {},
    "compile": {"backend": "eager"},
    "activation_checkpointing": {},
    "attention": {"backend": "math"},
}


def recipe(case: Case, speedups: dict[str, Any] | None = None, **train: Any) -> dict[str, Any]:
    return {
        "name": "compat",
        "seed": 0,
        "device": "cpu",
        "model": case.model,
        "task": {"name": case.task or "classification"},
        "data": {"dataset": case.data, "batch_size": 8},
        "optim": {"name": "adamw", "lr": 1e-3},
        "train": {"epochs": 1, "max_steps": 3, **train},
        "speedups": speedups or {},
        "log": {"progress": False, "tensorboard": False, "every_steps": 1},
        "checkpoint": {"every_epochs": 1, "keep": 0},
    }


def trained(summary: dict[str, Any]) -> dict[str, Any]:
    assert summary["status"] == "completed", summary
    assert math.isfinite(summary["metrics"]["train_loss"]) and math.isfinite(summary["metrics"]["val_loss"])
    return summary


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_trains_and_evaluates_through_a_recipe(name, tmp_path):
    summary = trained(run_recipe(validate_recipe(recipe(CASES[name])), out=tmp_path / "run"))
    assert summary["steps"] == 3 and (tmp_path / "run" / "checkpoints" / "last.pt").is_file()


def python_data(case: Case, splits_of: dict) -> tuple[Any, Any, dict[str, int]]:
    """Train and validation sets as a Python user builds them: plain tensors, float images, dict samples."""
    if case.kind == "images":
        shape, classes = IMAGES["shape"], IMAGES["num_classes"]
        x, y = torch.randn(40, *shape), torch.randint(0, classes, (40,))
        return (
            TensorDataset(x[:32], y[:32]),
            TensorDataset(x[32:], y[32:]),
            {"num_classes": classes, "in_channels": shape[0]},
        )
    if case.kind == "class_dicts":
        splits = compat_data.token_classes(num_samples=48, seed=0)
        return splits.train, splits.val, splits.model_args()
    windows = torch.randint(0, 256, (40, 17))
    if case.kind == "tokens":
        x, y = windows[:, :-1], windows[:, 1:]
        return TensorDataset(x[:32], y[:32]), TensorDataset(x[32:], y[32:]), {"vocab_size": 256, "context": 16}
    ids = [{"input_ids": w[:-1], "labels": w[:-1]} for w in windows]
    return ids[:32], ids[32:], {"vocab_size": 256, "context": 16}


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_trains_and_evaluates_through_the_trainer(name):
    case = CASES[name]
    train, val, shape = python_data(case, {})
    torch.manual_seed(0)
    model = build_model(ModelConfig(**case.model), **{"num_classes": None, **shape})
    task = {None: None, "model_loss": ModelLoss(), "tests.compat.models:loss": compat_models.loss}[case.task]
    trainer = Trainer(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-3),
        DataLoader(train, batch_size=8, shuffle=True),
        val_loader=DataLoader(val, batch_size=8),
        task=task,
        device="cpu",
        config=TrainConfig(max_steps=3),
    )
    trained(trainer.fit())


BF16_MAY_TURN_NAN = {("timm_cnn", "amp"), ("torchvision_resnet", "amp")}


@pytest.mark.parametrize(
    "name, speedup", [(name, speedup) for name, case in CASES.items() for speedup in case.speedups]
)
@pytest.mark.slow
def test_gets_the_speedups_that_apply(name, speedup, tmp_path):
    summary = run_recipe(validate_recipe(recipe(CASES[name], {speedup: SPEEDUPS[speedup]})), out=tmp_path / "run")
    # the batch-normed ResNets (timm's test_resnet, torchvision's resnet18) in bf16 on some CPUs turn NaN in about 1
    # run of 5 at the same seed (seen before the engine too, never on AVX512-BF16): the run says so ("diverged"),
    # and the speed-up ran, which is what this test checks
    if (name, speedup) not in BF16_MAY_TURN_NAN or summary["status"] != "diverged":
        trained(summary)
    assert speedup in summary["speedups"] and not summary["skipped_speedups"], summary["skipped_speedups"]


@pytest.mark.slow
def test_the_gpt_resumes_exactly_after_sigkill(write_recipe, tmp_path):
    """`accel train` killed outright, then `--resume`d, ends exactly where an uninterrupted run does."""
    path = write_recipe(recipe(CASES["view_gpt"], max_steps=None, epochs=2))
    whole, killed = tmp_path / "whole", tmp_path / "killed"

    def train(out, *extra):
        return subprocess.Popen(
            [sys.executable, "-m", "accel.cli", "train", str(path), "--out", str(out), *extra],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    victim = train(killed)
    wait_for_first_checkpoint(killed, victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    for run in (train(whole), train(killed, "--resume")):
        _, err = finish(run)
        assert run.returncode == 0, err
    a, b = (read_summary(out / "summary.json") for out in (whole, killed))
    assert a.metrics == b.metrics and a.steps == b.steps
