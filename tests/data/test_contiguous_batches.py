"""Every tensor a shipped dataset or collate path hands to the model is contiguous, as default_collate makes it, so
model code that calls `.view()` on its inputs and targets (tests/compat/models.py) trains on every dataset kind."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch

from accel.batches import tensors
from accel.config.recipe import validate_recipe
from accel.data.pipeline import build_data_pipeline
from accel.registry import DATASETS
from accel.runs.records import read_summary
from accel.train.run import build_trainer
from conftest import jpeg_folder, run_cli
from tests.compat.models import ViewGPT, ViewMLP

try:
    HAVE_DALI = importlib.util.find_spec("nvidia.dali") is not None
except ModuleNotFoundError:
    HAVE_DALI = False
CPU = torch.device("cpu")
IMAGE_OPS = [{"random_crop": {"size": 8, "padding": 2}}, "hflip", {"cutout": {"size": 3}}]


def text_folder(root):
    root.mkdir()
    for i in range(3):
        (root / f"m{i}.py").write_text("".join(f"def f{i}_{k}(x):\n    return x * {k}\n" for k in range(40)))
    return root


def token_file(root):
    path = root / "train.bin"
    np.random.default_rng(0).integers(0, 50, 4000, dtype=np.uint16).tofile(path)
    return path


def _tokens(tmp, layout, kind):
    if kind == "text_files":
        return {"name": "text_files", "root": str(text_folder(tmp / "text")), "context": 16, "layout": layout}
    return {"name": "token_file", "path": str(token_file(tmp)), "context": 16, "layout": layout}


def _synthetic(tmp, **data):
    return {"dataset": {"name": "synthetic", "shape": [3, 8, 8], "num_samples": 48, "num_classes": 4}, **data}


def _folder(tmp, **data):
    return {"dataset": {"name": "imagefolder", "root": str(jpeg_folder(tmp / "jpegs")), "image_size": 8}, **data}


# every dataset kind and collate path: the recipe's `data:` section for it
KINDS = {
    "text_files pairs": lambda tmp: {"dataset": _tokens(tmp, "pairs", "text_files")},
    "text_files hf": lambda tmp: {"dataset": _tokens(tmp, "hf", "text_files")},
    "token_file pairs": lambda tmp: {"dataset": _tokens(tmp, "pairs", "token_file")},
    "token_file hf": lambda tmp: {"dataset": _tokens(tmp, "hf", "token_file")},
    "in-memory synthetic": _synthetic,
    "in-memory digits": lambda tmp: {"dataset": {"name": "digits"}},
    "imagefolder": lambda tmp: _folder(tmp, loader={"num_workers": 0}),
    "imagefolder, workers": lambda tmp: _folder(tmp, loader={"num_workers": 1}),
    "imagefolder, cpu transforms": lambda tmp: _folder(
        tmp, transforms={"torchvision": ["RandomHorizontalFlip"], "albumentations": [{"HorizontalFlip": {"p": 1}}]}
    ),
    "decoded cache": lambda tmp: _folder(tmp, cache={"enabled": True, "dir": str(tmp / "cache")}),
    "dali": lambda tmp: _folder(tmp, loader={"backend": "dali"}),
    "prefetcher": lambda tmp: _synthetic(tmp, prefetch={"enabled": True}),
    "augment on device": lambda tmp: _synthetic(tmp, augment={"on": "device", "ops": IMAGE_OPS}),
    "augment on loader": lambda tmp: _synthetic(tmp, augment={"on": "loader", "ops": IMAGE_OPS}),
}
# mixup and cutmix make soft targets; they need `task: classification` (checked when the trainer is built)
MIXING = {
    "augment on device, mixup": {"on": "device", "ops": ["mixup"]},
    "augment on loader, cutmix": {"on": "loader", "ops": ["cutmix"]},
}
for _name, _augment in MIXING.items():
    KINDS[_name] = lambda tmp, augment=_augment: _synthetic(tmp, augment=augment)


def kinds():
    dali = pytest.mark.skipif(not HAVE_DALI, reason="nvidia.dali is not importable: `pip install 'accel[dali]'`")
    return [pytest.param(name, marks=[dali] if name == "dali" else []) for name in KINDS]


def recipe(data: dict, **more) -> dict:
    tokens = data["dataset"]["name"] in ("text_files", "token_file")
    hf = data["dataset"].get("layout") == "hf"
    model = (
        ("tests.compat.models:build_causal_lm" if hf else "tests.compat.models:build")
        if tokens
        else "tests.compat.models:build_mlp"
    )
    args = {"width": 16} if tokens else {"image_size": 8}
    return {
        "name": "contiguous",
        "seed": 0,
        "device": "cpu",
        "model": {"name": model, "args": args},
        "task": {"name": "tests.compat.models:loss"},
        "data": {"batch_size": 8, **data},
        "optim": {"name": "adamw", "lr": 1e-3},
        "train": {"max_steps": 3},
        "log": {"progress": False, "tensorboard": False, "every_steps": 1},
        **more,
    }


def assert_contiguous(batch, where: str) -> None:
    for i, tensor in enumerate(tensors(batch)):
        assert tensor.is_contiguous(), f"{where}: tensor {i} {tuple(tensor.shape)} has strides {tensor.stride()}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", kinds())
def test_every_batch_tensor_is_contiguous(kind, tmp_path):
    """What the data pipeline hands the trainer, after the device transform (normalisation, augmentation)."""
    spec = validate_recipe(recipe(KINDS[kind](tmp_path)))
    splits = DATASETS.get(spec.data.dataset.name).build(spec.data.dataset, spec.seed)
    data = build_data_pipeline(spec.data, splits, device=CPU, seed=0)
    for loader, transform, split in (
        (data.train_loader, data.train_transform, "train"),
        (data.val_loader, data.eval_transform, "val"),
    ):
        for i, batch in zip(range(2), loader):
            assert_contiguous(batch, f"{kind} {split} batch {i}, from the loader")
            if transform is not None:
                assert_contiguous(transform(*batch), f"{kind} {split} batch {i}, transformed")


@pytest.mark.slow
@pytest.mark.parametrize("kind", kinds())
def test_a_model_that_views_its_inputs_and_targets_trains_on_every_dataset_kind(kind, tmp_path):
    """`x.view(...)` / `targets.view(-1)` in the model: ViewGPT for token windows, ViewMLP for images."""
    overrides = {"task": "classification"} if kind in MIXING else {}
    trainer = build_trainer(validate_recipe(recipe(KINDS[kind](tmp_path), **overrides)))
    assert isinstance(trainer.module, ViewGPT if "text" in kind or "token" in kind else ViewMLP)
    summary = trainer.fit()
    assert summary["status"] == "completed" and summary["steps"] == 3
    assert math.isfinite(summary["metrics"]["train_loss"]) and math.isfinite(summary["metrics"]["val_loss"])


def test_channels_last_batches_are_contiguous_in_that_format(tmp_path):
    """The channels_last speed-up hands image batches over NHWC, the layout its model expects: contiguous in the
    channels_last memory format. (NCHW `.view()` flattening cannot work there; flattening pooled features can.)"""
    data = _synthetic(tmp_path, augment={"ops": IMAGE_OPS})
    spec = recipe(data, speedups={"channels_last": {"enabled": True}})
    spec["model"] = {"name": "tests.compat.models:build_cnn"}
    trainer = build_trainer(validate_recipe(spec))
    seen = []
    trainer.module.register_forward_pre_hook(lambda module, args: seen.append(args))
    summary = trainer.fit()
    assert summary["status"] == "completed" and summary["speedups"] == ["channels_last"]
    assert seen and all(len(args) == 2 for args in seen)  # (images, targets), through the task function
    for images, targets in seen:
        assert images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous()
        assert targets.is_contiguous()


@pytest.mark.slow
def test_the_gpt_trains_from_the_command_line_by_import_string(tmp_path, write_recipe):
    """The issue's case as a user meets it: `accel train`, the model and its loss named by import string (the
    repository root is on sys.path because `python -m` runs from it), a token file in nanoGPT's layout."""
    out = tmp_path / "run"
    result = run_cli("train", write_recipe(recipe(KINDS["token_file pairs"](tmp_path))), "--out", out)
    assert result.returncode == 0, result.stderr
    summary = read_summary(out / "summary.json")
    assert summary.status == "completed" and math.isfinite(summary.metrics["val_loss"])
