"""The DALI loader on CPU: shapes, labels that match their images, per-epoch permutations, shards, bad input."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from PIL import Image

from accel.config.recipe import validate_recipe
from accel.data import dali
from accel.data.dali import DaliLoader
from accel.errors import DataError
from conftest import cuda_only

try:
    HAVE_DALI = importlib.util.find_spec("nvidia.dali") is not None
except ModuleNotFoundError:
    HAVE_DALI = False
needs_dali = pytest.mark.skipif(not HAVE_DALI, reason="nvidia.dali is not importable: `pip install 'accel[dali]'`")
CPU = torch.device("cpu")
STEP = 12  # grey levels apart, so a decoded solid image tells which file it came from despite JPEG error


def write_folder(root, per_class: int = 5) -> list[tuple[str, int]]:
    """Solid grey JPEGs of assorted sizes; file k has grey level STEP * (k + 1)."""
    samples = []
    for label, name in enumerate(["a", "b"]):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            k = label * per_class + i
            path = root / name / f"{i}.jpg"
            Image.new("RGB", (20 + 3 * i, 16 + 2 * k), (STEP * (k + 1),) * 3).save(path, quality=95)
            samples.append((str(path), label))
    return samples


def loader(samples, **kw) -> DaliLoader:
    options = dict(
        image_size=8, mean=(0.0,) * 3, std=(1.0,) * 3, batch_size=4, train=True, drop_last=False, seed=0, device=CPU
    )
    return DaliLoader(samples, **{**options, **kw})


def file_index(images: torch.Tensor) -> list[int]:
    """Which file each decoded image came from, read off its grey level (mean 0, std 1: values are x / 255)."""
    return [round(float(img.mean()) * 255 / STEP) - 1 for img in images]


@needs_dali
def test_batches_have_the_torch_structure_and_labels_match_images(tmp_path):
    samples = write_folder(tmp_path)
    dl = loader(samples)
    assert len(dl) == 3 and dl.sampler is None
    for epoch in range(2):
        seen = []
        for images, labels in dl:
            assert images.shape[1:] == (3, 8, 8) and images.dtype == torch.float32 and labels.dtype == torch.int64
            files = file_index(images)
            assert labels.tolist() == [samples[k][1] for k in files]
            seen += files
        assert sorted(seen) == list(range(10)), f"epoch {epoch} is not a permutation"
    assert [len(labels) for _, labels in loader(samples, drop_last=True)] == [4, 4]


@needs_dali
def test_normalisation_uses_the_dataset_statistics(tmp_path):
    samples = write_folder(tmp_path, per_class=1)
    images, _ = next(iter(loader(samples, mean=(0.5,) * 3, std=(0.25,) * 3, train=False)))
    grey = torch.tensor([STEP * (k + 1) for k in range(2)], dtype=torch.float32)
    expected = (grey / 255 - 0.5) / 0.25
    assert torch.allclose(images.mean(dim=(1, 2, 3)), expected, atol=0.05)


@needs_dali
def test_shards_split_each_epoch(tmp_path):
    samples = write_folder(tmp_path)
    parts = [[k for images, _ in loader(samples, rank=r, world_size=2) for k in file_index(images)] for r in range(2)]
    assert len(parts[0]) == len(parts[1]) == 5 and sorted(parts[0] + parts[1]) == list(range(10))


@needs_dali
def test_a_corrupt_jpeg_is_a_data_error_naming_it(tmp_path):
    samples = write_folder(tmp_path, per_class=2)
    (tmp_path / "b" / "1.jpg").write_bytes(b"\xff\xd8\xff\xe0 not image data")
    with pytest.raises(DataError, match="b/1.jpg"):
        list(loader(samples))


@needs_dali
def test_a_recipe_trains_with_the_dali_backend(tmp_path, tiny):
    from accel.train.run import build_trainer

    write_folder(tmp_path / "images")
    tiny["data"] = {
        "dataset": {"name": "imagefolder", "root": str(tmp_path / "images"), "image_size": 8, "val_fraction": 0.2},
        "batch_size": 4,
        "loader": {"backend": "dali"},
    }
    trainer = build_trainer(validate_recipe(tiny))
    assert isinstance(trainer.train_loader, DaliLoader) and len(trainer.train_loader) == 2
    assert trainer.fit()["status"] == "completed"


def test_missing_dali_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(dali, "dali_available", lambda: False)
    with pytest.raises(DataError, match=r"not installed.*pip install 'accel\[dali\]'"):
        loader([(str(tmp_path / "x.jpg"), 0)])


def test_dali_refuses_what_only_the_torch_loader_does(tmp_path, tiny):
    from accel.train.run import build_trainer

    tiny["data"]["loader"] = {"backend": "dali"}
    tiny["data"]["cache"] = {"enabled": True, "dir": str(tmp_path)}
    with pytest.raises(DataError, match="data.cache.enabled"):
        build_trainer(validate_recipe(tiny))


@needs_dali
@cuda_only
def test_mixed_decoding_on_the_gpu_gives_the_cpu_pipelines_batches(tmp_path):
    samples = write_folder(tmp_path)
    on_gpu, on_cpu = loader(samples, train=False, device=torch.device("cuda")), loader(samples, train=False)
    for (gpu_images, gpu_labels), (cpu_images, cpu_labels) in zip(on_gpu, on_cpu, strict=True):
        assert gpu_images.is_cuda  # nvJPEG decoded it on the GPU, and it stayed there
        assert torch.equal(gpu_labels.cpu(), cpu_labels)
        assert file_index(gpu_images.cpu()) == file_index(cpu_images)
        torch.testing.assert_close(gpu_images.cpu(), cpu_images, atol=4 / 255, rtol=0)  # two JPEG decoders
