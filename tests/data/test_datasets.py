"""Dataset builders: real bundled data (mnist5k, digits), synthetic, and file formats written here in tmp_path."""

from __future__ import annotations

import gzip
import logging
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import default_collate

import accel.data.datasets
from accel.data.datasets import Cifar10, Digits, ImageFolder, Mnist5k, Synthetic
from accel.data.datasets.mnist import locate_mnist5k, read_mnist5k
from accel.data.loaders import collate
from accel.errors import DataError
from accel.registry import DATASETS


def test_every_dataset_is_registered_with_a_documented_config():
    for name in ["mnist5k", "digits", "synthetic", "cifar10", "imagefolder"]:
        config = DATASETS.get(name).Config
        undocumented = [f for f, info in config.model_fields.items() if not info.description]
        assert not undocumented, f"{name}: fields without description: {undocumented}"


# --- mnist5k ---------------------------------------------------------------------------------------------------


def test_mnist5k_shapes_split_and_labels():
    splits = Mnist5k.build(Mnist5k.Config(name="mnist5k"), seed=0)
    assert (len(splits.train), len(splits.val)) == (4000, 1000)
    image, label = splits.train[0]
    assert image.dtype == torch.uint8 and image.shape == (1, 28, 28) and isinstance(label, int)
    assert splits.sample_shape == (1, 28, 28) and splits.num_classes == 10
    assert (splits.mean, splits.std) == ((0.1307,), (0.3081,))
    all_labels = torch.cat([splits.train.labels, splits.val.labels])
    assert all_labels.bincount().tolist() == [500] * 10  # the real file: 500 of each digit
    assert 0.10 < splits.train.images.float().mean().item() / 255 < 0.16  # MNIST's mean is ~0.13


def test_mnist5k_pixels_keep_row_order(tmp_path):
    path = locate_mnist5k(None)
    first_row = np.array(gzip.open(path, "rt").readline().split(","), dtype=np.int64)
    data = read_mnist5k(path)
    assert data.images[0].flatten().tolist() == first_row[:784].tolist()
    assert data.labels[0].item() == first_row[784]


def test_mnist5k_split_is_deterministic_from_seed():
    a, b = (Mnist5k.build(Mnist5k.Config(name="mnist5k"), seed=1) for _ in range(2))
    c = Mnist5k.build(Mnist5k.Config(name="mnist5k"), seed=2)
    assert torch.equal(a.train.images, b.train.images) and torch.equal(a.val.labels, b.val.labels)
    assert not torch.equal(a.val.images, c.val.images)


def test_mnist5k_root_accepts_the_file_or_its_folder():
    path = locate_mnist5k(None)
    for root in (str(path), str(path.parent)):
        assert len(Mnist5k.build(Mnist5k.Config(name="mnist5k", root=root, val_fraction=0.5), 0).val) == 2500


def test_mnist5k_missing_root_names_the_path_and_the_shipped_copy(tmp_path):
    with pytest.raises(DataError, match="leave it unset to use the copy shipped with accel") as err:
        Mnist5k.build(Mnist5k.Config(name="mnist5k", root=str(tmp_path / "nope.csv.gz")), 0)
    assert str(tmp_path / "nope.csv.gz") in str(err.value)


def test_mnist5k_reads_the_copy_shipped_inside_accel():
    path = locate_mnist5k(None)
    assert path.parent == Path(accel.data.datasets.__file__).parent and path.stat().st_size > 1_000_000


def test_a_gathered_batch_collates_to_what_the_samples_one_by_one_collate_to():
    train = Mnist5k.build(Mnist5k.Config(name="mnist5k"), 0).train
    indices = [5, 0, 3999]
    gathered, one_by_one = collate(train.__getitems__(indices)), default_collate([train[i] for i in indices])
    assert len(gathered) == len(one_by_one) == 2
    for mine, torchs in zip(gathered, one_by_one):
        assert mine.dtype == torchs.dtype and torch.equal(mine, torchs)


# --- digits, synthetic -------------------------------------------------------------------------------------------


def test_digits_scaled_to_uint8():
    splits = Digits.build(Digits.Config(name="digits"), seed=0)
    assert (len(splits.train), len(splits.val)) == (1438, 359)
    image, label = splits.val[0]
    assert image.shape == (1, 8, 8) and image.dtype == torch.uint8 and 0 <= label < 10
    assert splits.train.images.max() == 255  # 16 maps to 255, not left at 16
    assert 0.2 < splits.mean[0] < 0.4 and 0.2 < splits.std[0] < 0.5


def test_synthetic_is_deterministic_and_shaped():
    cfg = Synthetic.Config(name="synthetic", shape=[3, 16, 12], num_samples=100, num_classes=4)
    a, b, c = Synthetic.build(cfg, 0), Synthetic.build(cfg, 0), Synthetic.build(cfg, 1)
    assert torch.equal(a.train.images, b.train.images) and torch.equal(a.train.labels, b.train.labels)
    assert not torch.equal(a.train.images, c.train.images)
    assert (len(a.train), len(a.val)) == (80, 20) and a.sample_shape == (3, 16, 12) and a.num_classes == 4
    assert a.train.images.dtype == torch.uint8 and a.train.images.shape == (80, 3, 16, 12)
    assert len(a.mean) == 3 and a.train.labels.max() < 4


def test_synthetic_is_learnable():
    splits = Synthetic.build(Synthetic.Config(name="synthetic", num_samples=500), 0)
    x, y = splits.train.images.flatten(1).float(), splits.train.labels
    centroids = torch.stack([x[y == k].mean(0) for k in range(10)])
    pred = torch.cdist(splits.val.images.flatten(1).float(), centroids).argmin(1)
    assert (pred == splits.val.labels).float().mean() > 0.9


def test_synthetic_config_is_strict():
    with pytest.raises(ValueError):
        Synthetic.Config(name="synthetic", shape=[32, 32])
    with pytest.raises(ValueError):
        Synthetic.Config(name="synthetic", num_sample=10)


# --- cifar10 -----------------------------------------------------------------------------------------------------


def write_cifar(folder: Path, n: int = 4) -> Path:
    """Fake batches: sample i of batch b has R=b, G=i, B=100+i planes and label (b + i) % 10."""
    folder.mkdir(parents=True)
    for b, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        i = np.arange(n)[:, None].repeat(1024, 1)
        data = np.concatenate([np.full((n, 1024), b), i, 100 + i], axis=1).astype(np.uint8)
        batch = {b"batch_label": b"x", b"labels": [(b + i) % 10 for i in range(n)], b"data": data}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    return folder


@pytest.mark.parametrize("nested", [True, False])
def test_cifar10_from_both_root_forms(tmp_path, nested):
    batches = write_cifar(tmp_path / "cifar-10-batches-py")
    splits = Cifar10.build(Cifar10.Config(name="cifar10", root=str(tmp_path if nested else batches)), 0)
    assert (len(splits.train), len(splits.val)) == (20, 4) and splits.sample_shape == (3, 32, 32)
    image, label = splits.train[5]  # batch 1 (b=1), sample 1
    assert image.dtype == torch.uint8 and image.shape == (3, 32, 32) and label == 2
    assert [image[c].unique().tolist() for c in range(3)] == [[1], [1], [101]]  # channel-planar RGB
    assert splits.val[0][0][0].unique().tolist() == [5]  # test_batch, not a training batch


def test_cifar10_fraction_split(tmp_path):
    write_cifar(tmp_path / "cifar-10-batches-py")
    cfg = Cifar10.Config(name="cifar10", root=str(tmp_path), val_split="fraction", val_fraction=0.25)
    splits = Cifar10.build(cfg, 0)
    assert (len(splits.train), len(splits.val)) == (15, 5)
    assert 5 not in splits.val.images[:, 0, 0, 0].tolist()  # the test batch stays out


def test_cifar10_missing_root(tmp_path):
    with pytest.raises(DataError, match="cifar-10-python.tar.gz") as err:
        Cifar10.build(Cifar10.Config(name="cifar10", root=str(tmp_path / "missing")), 0)
    assert str(tmp_path / "missing") in str(err.value)


def test_cifar10_missing_batch_names_the_file(tmp_path):
    batches = write_cifar(tmp_path / "cifar-10-batches-py")
    (batches / "data_batch_3").unlink()
    with pytest.raises(DataError, match="cifar-10-batches-py/") as err:
        Cifar10.build(Cifar10.Config(name="cifar10", root=str(tmp_path)), 0)
    assert f"missing {batches / 'data_batch_3'}" in str(err.value)


@pytest.mark.parametrize(
    "content",
    [
        b"not a pickle",
        pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)}),
        pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}),
    ],
)
def test_cifar10_malformed_batch_names_the_file(tmp_path, content):
    batches = write_cifar(tmp_path / "cifar-10-batches-py")
    (batches / "test_batch").write_bytes(content)
    with pytest.raises(DataError) as err:
        Cifar10.build(Cifar10.Config(name="cifar10", root=str(tmp_path)), 0)
    assert str(batches / "test_batch") in str(err.value) and "b'labels'" in str(err.value)


class _TouchesFile:
    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_cifar10_pickle_cannot_run_code(tmp_path):
    batches = write_cifar(tmp_path / "cifar-10-batches-py")
    marker = tmp_path / "code-ran"
    (batches / "data_batch_1").write_bytes(pickle.dumps({b"data": _TouchesFile(marker), b"labels": []}))
    with pytest.raises(DataError, match="refusing to load"):
        Cifar10.build(Cifar10.Config(name="cifar10", root=str(tmp_path)), 0)
    assert not marker.exists()


# --- imagefolder -------------------------------------------------------------------------------------------------


def write_images(folder: Path, counts: dict[str, int], size=(30, 20), fmt="png") -> Path:
    """counts images per class folder; pixel value 10 * (index + 1) so files differ."""
    for name, n in counts.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.new("RGB", size, (10 * (i + 1), 0, 0)).save(folder / name / f"{i}.{fmt}")
    return folder


# 16-bit grey value -> the 8-bit value the model must get: x / 257, rounded (truncation would keep x % 256)
SIXTEEN_BIT = {0: 0, 128: 0, 129: 1, 257 * 100: 100, 40000: 156, 65535: 255}


def write_16_bit_pngs(folder: Path) -> Path:
    """Class `a`: one 16-bit greyscale PNG (PIL mode I;16) per SIXTEEN_BIT value; class `b`: 8-bit RGB PNGs."""
    (folder / "a").mkdir(parents=True, exist_ok=True)
    for i, value in enumerate(SIXTEEN_BIT):
        Image.new("I;16", (20, 16), value).save(folder / "a" / f"{i}.png")
    return write_images(folder, {"b": 3}, size=(20, 16))


def imagefolder(root: Path, **kw) -> ImageFolder.Config:
    return ImageFolder.Config(name="imagefolder", root=str(root), image_size=16, **kw)


def test_imagefolder_train_val_subfolders(tmp_path):
    write_images(tmp_path / "train", {"dog": 3, "cat": 2}, fmt="jpg")
    write_images(tmp_path / "val", {"cat": 1, "dog": 1})
    splits = ImageFolder.build(imagefolder(tmp_path), 0)
    assert (len(splits.train), len(splits.val), splits.num_classes) == (5, 2, 2)
    assert splits.train.classes == ["cat", "dog"]  # sorted, whatever order they were made in
    assert [label for _, label in splits.train.samples] == [0, 0, 1, 1, 1]
    image, label = splits.val[1]
    assert image.shape == (3, 16, 16) == splits.sample_shape and image.dtype == torch.uint8 and label == 1


def test_imagefolder_train_without_val_splits_train_not_one_class_called_train(tmp_path, caplog):
    write_images(tmp_path / "train", {"cat": 5, "dog": 5})
    with caplog.at_level(logging.WARNING):
        splits = ImageFolder.build(imagefolder(tmp_path), 0)
    assert splits.num_classes == 2 and splits.train.classes == ["cat", "dog"]
    assert (len(splits.train), len(splits.val)) == (8, 2)
    assert f"{tmp_path} has train/ but no val/: splitting train/ by val_fraction (0.2)" in caplog.text


def test_imagefolder_a_single_class_is_warned_about(tmp_path, caplog):
    write_images(tmp_path, {"only": 4})
    with caplog.at_level(logging.WARNING):
        splits = ImageFolder.build(imagefolder(tmp_path), 0)
    assert splits.num_classes == 1
    assert "holds one class folder (`only`): every label is 0, so a classification accuracy is 100%" in caplog.text
    caplog.clear()
    write_images(tmp_path, {"other": 1})
    with caplog.at_level(logging.WARNING):
        ImageFolder.build(imagefolder(tmp_path), 0)
    assert "one class folder" not in caplog.text


def test_imagefolder_fraction_split_is_seeded(tmp_path):
    write_images(tmp_path, {"a": 5, "b": 5})
    a, b, c = (ImageFolder.build(imagefolder(tmp_path), seed) for seed in (0, 0, 1))
    assert (len(a.train), len(a.val)) == (8, 2)
    assert a.val.samples == b.val.samples and a.val.samples != c.val.samples


def test_imagefolder_resizes_short_side_then_center_crops(tmp_path):
    (tmp_path / "x").mkdir()
    strip = np.zeros((16, 48, 3), np.uint8)
    strip[:, 16:32] = 255  # only the middle third is white
    Image.fromarray(strip).save(tmp_path / "x" / "wide.png")
    Image.new("L", (8, 8), 200).save(tmp_path / "x" / "gray.png")  # grayscale comes out as 3 channels
    data = ImageFolder.build(imagefolder(tmp_path, val_fraction=0.0), 0).train
    images = {Path(path).name: data[i][0] for i, (path, _) in enumerate(data.samples)}
    assert images["wide.png"].shape == (3, 16, 16) and images["wide.png"].min() == 255
    assert images["gray.png"].shape == (3, 16, 16) and images["gray.png"].unique().tolist() == [200]


def test_imagefolder_ignores_non_image_files(tmp_path):
    write_images(tmp_path, {"a": 2, "b": 2})
    (tmp_path / "a" / "notes.txt").write_text("hi")
    (tmp_path / "b" / "labels.csv").write_text("1,2")
    (tmp_path / "README").write_text("top-level files are not classes")
    splits = ImageFolder.build(imagefolder(tmp_path, val_fraction=0.0, extensions=[".PNG"]), 0)
    assert len(splits.train) == 4 and splits.val is None
    assert all(path.endswith(".png") for path, _ in splits.train.samples)


@pytest.mark.parametrize(
    "layout, message",
    [
        ({}, "does not exist"),
        ({"README.txt": None}, "has no class folders"),
        ({"a/x.txt": None, "b/y.txt": None}, "found no images"),
        ({"a/0.png": 1, "b/notes.txt": None}, "class folder {root}/b holds no images"),
        ({"train/a/0.png": 1, "val/z/0.png": 1}, "{root}/val/z is a class the training folder does not have"),
    ],
)
def test_imagefolder_bad_layouts(tmp_path, layout, message):
    root = tmp_path / "root"
    for rel, is_image in layout.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4)).save(root / rel) if is_image else (root / rel).write_text("x")
    with pytest.raises(DataError, match="ROOT/<class_name>/<image files>|Add images") as err:
        ImageFolder.build(imagefolder(root), 0)
    assert message.format(root=root) in str(err.value)


def test_imagefolder_decodes_16_bit_pngs_scaled_to_8_bits_beside_8_bit_ones(tmp_path):
    write_16_bit_pngs(tmp_path)
    data = ImageFolder.build(imagefolder(tmp_path, val_fraction=0.0), 0).train
    images = [data[i][0] for i in range(len(data))]
    assert all(image.dtype == torch.uint8 and image.shape == (3, 16, 16) for image in images)
    greys = [int(image[0, 0, 0]) for image, (path, _) in zip(images, data.samples) if "/a/" in path]
    assert greys == list(SIXTEEN_BIT.values())
    assert all(int(image.max()) == int(image.min()) for image in images[: len(SIXTEEN_BIT)])  # uniform: R = G = B
    batch = collate([data[i] for i in range(len(data))])  # mixed depths in one batch: it failed as uint16 + uint8
    assert batch[0].dtype == torch.uint8 and batch[0].shape == (len(data), 3, 16, 16)


def write_corrupt(tmp_path: Path) -> Path:
    write_images(tmp_path, {"a": 3}, fmt="jpg")
    good = (tmp_path / "a" / "1.jpg").read_bytes()
    (tmp_path / "a" / "1.jpg").write_bytes(good[: len(good) // 2])  # truncated mid-stream
    return tmp_path / "a" / "1.jpg"


def test_imagefolder_corrupt_image_fails_naming_the_file(tmp_path):
    bad = write_corrupt(tmp_path)
    data = ImageFolder.build(imagefolder(tmp_path, val_fraction=0.0), 0).train
    assert [Path(p).name for p, _ in data.samples] == ["0.jpg", "1.jpg", "2.jpg"]
    assert data[0][0].shape == (3, 16, 16)
    with pytest.raises(DataError, match="on_corrupt: skip") as err:
        data[1]
    assert str(bad) in str(err.value)


def test_imagefolder_corrupt_image_skip_substitutes_next(tmp_path, caplog):
    bad = write_corrupt(tmp_path)
    data = ImageFolder.build(imagefolder(tmp_path, val_fraction=0.0, on_corrupt="skip"), 0).train
    with caplog.at_level(logging.WARNING):
        image, label = data[1]
    assert torch.equal(image, data[2][0]) and data.skipped == 1
    assert str(bad) in caplog.text


def test_imagefolder_skip_gives_up_when_nothing_decodes(tmp_path):
    write_corrupt(tmp_path)
    for name in ("0.jpg", "2.jpg"):
        (tmp_path / "a" / name).write_bytes(b"garbage")
    data = ImageFolder.build(imagefolder(tmp_path, val_fraction=0.0, on_corrupt="skip"), 0).train
    with pytest.raises(DataError, match="3 consecutive images .*0.jpg on could not be decoded"):
        data[0]
