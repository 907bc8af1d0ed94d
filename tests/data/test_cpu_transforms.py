"""CPU transforms from YAML: names and arguments validated with the recipe; they run in workers on uint8 images."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accel.config.recipe import load_recipe
from accel.data.cpu_transforms import CpuTransformsConfig, TransformedDataset, apply_cpu_transforms, build_transform
from accel.errors import DataError, RecipeError

from .test_loaders import memory_dataset

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("albumentations", reason="albumentations is not installed (the `data` extra)")


def test_entries_build_with_arguments_and_nesting():
    flip = build_transform("torchvision", {"RandomHorizontalFlip": {"p": 1.0}})
    assert type(flip).__name__ == "RandomHorizontalFlip" and flip.p == 1.0
    nested = build_transform("albumentations", {"OneOf": {"transforms": ["HorizontalFlip", "VerticalFlip"]}})
    assert [type(t).__name__ for t in nested.transforms] == ["HorizontalFlip", "VerticalFlip"]


@pytest.mark.parametrize(
    "kind, entry, message",
    [
        ("torchvision", "RandomHorizontalFlp", "did you mean `RandomHorizontalFlip`"),
        ("torchvision", {"RandomCrop": {"siz": 3}}, "no argument `siz`"),
        ("albumentations", {"HorizontalFlip": {"q": 1}}, "no argument `q`"),  # albumentations itself only warns
        ("albumentations", {"RandomCrop": {"height": "x", "width": 3}}, "RandomCrop"),
        ("albumentations", {"HorizontalFlip": {}, "VerticalFlip": {}}, "one `Name"),
    ],
)
def test_bad_entries_are_errors_that_name_the_problem(kind, entry, message):
    with pytest.raises(ValueError, match=message):
        build_transform(kind, entry)


def test_recipe_errors_point_at_the_file_and_line(tiny, write_recipe):
    tiny["data"]["transforms"] = {"albumentations": ["HorizontalFlip", {"RandomBrightnesContrast": {"p": 0.2}}]}
    with pytest.raises(RecipeError) as err:
        load_recipe(write_recipe(tiny))
    text = str(err.value)
    assert "data.transforms.albumentations.1" in text and "RandomBrightnessContrast" in text and "line" in text


def test_pipelines_run_on_uint8_chw_and_keep_the_label():
    data = memory_dataset()  # 1x4x4 uint8
    cfg = CpuTransformsConfig(
        torchvision=[{"RandomHorizontalFlip": {"p": 1.0}}], albumentations=[{"VerticalFlip": {"p": 1.0}}]
    )
    wrapped = apply_cpu_transforms(data, cfg)
    image, label = wrapped[3]
    assert image.dtype == torch.uint8 and image.shape == (1, 4, 4) and label == data[3][1]
    assert torch.equal(image, data[3][0].flip(-1).flip(-2))
    assert apply_cpu_transforms(data, CpuTransformsConfig()) is data


def test_a_shape_or_dtype_change_is_a_data_error_naming_the_sample():
    data = memory_dataset()
    for entry in ({"Resize": {"size": 8}}, {"ToDtype": {"dtype": None, "scale": True}}):
        wrapped = TransformedDataset(data, lambda image, e=entry: build_transform("torchvision", e)(image).float())
        with pytest.raises(DataError, match="sample 0"):
            wrapped[0]


# Run in a fresh interpreter, as `accel train` runs: forked workers inherit every earlier test's state (threads,
# pools, objects pending collection) from the long-lived pytest process, which no training process carries.
SEEDED_WORKERS = """
import sys, torch
from accel.data.cpu_transforms import CpuTransformsConfig, apply_cpu_transforms
from accel.data.loaders import LoaderConfig, build_loader
from tests.data.test_loaders import memory_dataset

data = memory_dataset()
cfg = CpuTransformsConfig(albumentations=[{"HorizontalFlip": {"p": 0.5}}],
                          torchvision=[{"RandomVerticalFlip": {"p": 0.5}}])

def run(seed):
    loader = build_loader(apply_cpu_transforms(data, cfg), LoaderConfig(num_workers=2, persistent_workers=False),
                          batch_size=4, sampler=None, drop_last=False, seed=seed, device=torch.device("cpu"))
    return torch.cat([images for images, _ in loader])

first, again, other = run(0), run(0), run(1)
print(torch.equal(first, again), torch.equal(first, other), torch.equal(first, data.images))
"""


@pytest.mark.slow
def test_random_transforms_in_workers_repeat_with_the_seed():
    done = subprocess.run([sys.executable, "-c", SEEDED_WORKERS], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    same_seed, other_seed, untouched = done.stdout.split()
    assert (same_seed, other_seed, untouched) == ("True", "False", "False")
