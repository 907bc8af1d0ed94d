"""The decoded cache: same samples as decoding, reused when current, rebuilt when stale, never half-written."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch
from PIL import Image

from accel.cli import main
from accel.data import cache
from accel.data.cache import CacheConfig, cached, fingerprint
from accel.data.datasets import ImageFileDataset, ImageFolder, TensorImageDataset
from accel.errors import DataError

from .test_datasets import SIXTEEN_BIT, write_16_bit_pngs, write_images


def folder_dataset(root, **kw) -> ImageFileDataset:
    if not root.exists():
        write_images(root, {"a": 3, "b": 2}, fmt="jpg")
    cfg = ImageFolder.Config(
        name="imagefolder", root=str(root), image_size=kw.pop("image_size", 8), val_fraction=0.0, **kw
    )
    return ImageFolder.build(cfg, 0).train


def decoded(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.stack([dataset[i][0] for i in range(len(dataset))]),
        torch.tensor([dataset[i][1] for i in range(len(dataset))]),
    )


def forbid_decoding(monkeypatch):
    def fail(self, path):
        raise AssertionError(f"decoded {path} although the cache is current")

    monkeypatch.setattr(ImageFileDataset, "load", fail)


def test_cache_holds_the_decoded_samples_and_is_reused(tmp_path, monkeypatch):
    data = folder_dataset(tmp_path / "images")
    cfg = CacheConfig(enabled=True, dir=str(tmp_path / "cache"))
    first = cached(data, cfg, "imgs")
    assert isinstance(first, TensorImageDataset) and first.images.shape == (5, 3, 8, 8)
    images, labels = decoded(data)
    assert torch.equal(first.images, images) and torch.equal(first.labels, labels)
    forbid_decoding(monkeypatch)
    again = cached(data, cfg, "imgs")
    assert torch.equal(again.images, images)
    [entry] = cache.entries(tmp_path / "cache")
    assert entry["samples"] == 5 and entry["shape"] == [3, 8, 8] and entry["fingerprint"] == fingerprint(data)


def test_fingerprint_follows_files_and_settings(tmp_path):
    data = folder_dataset(tmp_path / "images")
    key = fingerprint(data)
    assert fingerprint(folder_dataset(tmp_path / "images")) == key  # same files, same settings
    assert fingerprint(folder_dataset(tmp_path / "images", image_size=12)) != key
    assert fingerprint(folder_dataset(tmp_path / "images", on_corrupt="skip")) != key
    path = tmp_path / "images" / "a" / "1.jpg"
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: same bytes, new mtime
    assert fingerprint(data) != key


def test_a_changed_source_file_rebuilds_the_entry(tmp_path):
    data = folder_dataset(tmp_path / "images")
    cfg = CacheConfig(enabled=True, dir=str(tmp_path / "cache"))
    before = cached(data, cfg, "imgs").images.clone()
    Image.new("RGB", (30, 20), (0, 200, 0)).save(tmp_path / "images" / "a" / "0.jpg")  # new content
    after = cached(data, cfg, "imgs")
    assert not torch.equal(before, after.images) and torch.equal(after.images, decoded(data)[0])
    assert len(cache.entries(tmp_path / "cache")) == 2  # the stale entry stays until `accel cache clear`


def test_a_failed_build_leaves_nothing_that_could_be_used(tmp_path):
    data = folder_dataset(tmp_path / "images")
    (tmp_path / "images" / "b" / "1.jpg").write_bytes(b"\xff\xd8\xff truncated")
    root = tmp_path / "cache"
    with pytest.raises(DataError, match="1.jpg"):
        cached(data, CacheConfig(enabled=True, dir=str(root)), "imgs")
    assert list(root.iterdir()) == []  # the temporary folder is gone, no entry was renamed into place
    (root / f"imgs-{fingerprint(data)[:20]}").mkdir()  # a folder with the final name but no meta.json
    assert cache.entries(root) == []


def test_skipped_images_are_counted_in_the_log(tmp_path, caplog):
    data = folder_dataset(tmp_path / "images", on_corrupt="skip")
    (tmp_path / "images" / "b" / "1.jpg").write_bytes(b"not an image")
    with caplog.at_level(logging.WARNING, logger="accel"):
        out = cached(data, CacheConfig(enabled=True, dir=str(tmp_path / "cache")), "imgs")
    assert len(out) == 5 and "1 unreadable image" in caplog.text


def test_unwritable_cache_dir_is_a_data_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder cannot be made inside a file, even by root
    with pytest.raises(DataError, match="not writable.*data.cache.dir"):
        cached(folder_dataset(tmp_path / "images"), CacheConfig(enabled=True, dir=str(blocker / "cache")), "x")


def test_in_memory_datasets_pass_through(tmp_path):
    data = TensorImageDataset(torch.zeros(2, 1, 2, 2, dtype=torch.uint8), torch.tensor([0, 1]))
    assert cached(data, CacheConfig(enabled=True, dir=str(tmp_path)), "mem") is data


def test_cli_build_info_clear(tmp_path, tiny, write_recipe, capsys):
    write_images(tmp_path / "images", {"a": 3, "b": 3}, fmt="jpg")
    tiny["data"] = {
        "dataset": {"name": "imagefolder", "root": str(tmp_path / "images"), "image_size": 8},
        "batch_size": 2,
        "cache": {"enabled": True, "dir": str(tmp_path / "cache")},
    }
    assert main(["cache", "build", str(write_recipe(tiny))]) == 0
    built = capsys.readouterr().out.split()
    assert len(built) == 2 and all("imagefolder-" in line for line in built)  # train and val entries
    assert main(["cache", "info", "--dir", str(tmp_path / "cache")]) == 0
    assert "2 entries" in capsys.readouterr().out
    assert main(["cache", "clear", "--dir", str(tmp_path / "cache")]) == 0
    assert "removed 2" in capsys.readouterr().out and cache.entries(tmp_path / "cache") == []


def test_trainer_reads_the_cache(tmp_path, tiny):
    from accel.config.recipe import validate_recipe
    from accel.train.run import build_trainer

    write_images(tmp_path / "images", {"a": 4, "b": 4}, fmt="jpg")
    tiny["data"] = {
        "dataset": {"name": "imagefolder", "root": str(tmp_path / "images"), "image_size": 8},
        "batch_size": 2,
        "cache": {"enabled": True, "dir": str(tmp_path / "cache")},
    }
    tiny["model"]["args"]["width"] = 2
    trainer = build_trainer(validate_recipe(tiny))
    assert isinstance(trainer.train_loader.dataset, TensorImageDataset) and trainer.train_loader.num_workers == 0
    assert trainer.fit()["status"] == "completed"


def test_16_bit_pngs_are_cached_scaled_and_train_with_or_without_the_cache(tmp_path, tiny, write_recipe):
    write_16_bit_pngs(tmp_path / "images")
    tiny["data"] = {
        "dataset": {"name": "imagefolder", "root": str(tmp_path / "images"), "image_size": 8, "val_fraction": 0.0},
        "batch_size": 3,
    }
    tiny["model"]["args"]["width"] = 2
    tiny["train"]["epochs"] = 1
    assert main(["train", str(write_recipe(tiny)), "--out", str(tmp_path / "run")]) == 0  # no cache
    tiny["data"]["cache"] = {"enabled": True, "dir": str(tmp_path / "cache")}
    recipe = write_recipe(tiny, "cached.yaml")
    assert main(["cache", "build", str(recipe)]) == 0
    [entry] = cache.entries(tmp_path / "cache")
    images = cache.load_entry(Path(entry["path"])).images
    assert images.dtype == torch.uint8
    assert images[: len(SIXTEEN_BIT), :, 0, 0].tolist() == [[v] * 3 for v in SIXTEEN_BIT.values()]  # class a first
    assert torch.equal(images, decoded(folder_dataset(tmp_path / "images"))[0])
    assert main(["train", str(recipe), "--out", str(tmp_path / "cached-run")]) == 0


class Wide(torch.utils.data.Dataset):
    """Files decoded to 16-bit pixels that nothing scaled, as imagefolder's were."""

    def __init__(self, folder):
        self.samples = [(str(write_images(folder, {"a": 4}) / "a" / f"{i}.png"), 0) for i in range(4)]

    def cache_key(self):
        return {"dataset": "wide"}

    def __len__(self):
        return 4

    def __getitem__(self, index):
        return torch.full((3, 2, 2), 40000, dtype=torch.int32), 0


def test_a_dataset_of_wider_pixels_is_refused_not_wrapped(tmp_path):
    with pytest.raises(DataError, match=r"samples 0\.\.3 are torch.int32 images; the cache holds uint8"):
        cached(Wide(tmp_path / "images"), CacheConfig(enabled=True, dir=str(tmp_path / "cache")), "wide")
    assert cache.entries(tmp_path / "cache") == []


@pytest.mark.slow
def test_info_names_a_damaged_entry_and_clear_removes_it(tmp_path, capsys):
    root = tmp_path / "cache"
    cached(folder_dataset(tmp_path / "images"), CacheConfig(enabled=True, dir=str(root)), "imgs")
    [entry] = [p for p in root.iterdir()]
    (entry / "meta.json").write_text('{"samples": 5, "sha')  # cut short
    assert main(["cache", "info", "--dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"{entry}  DAMAGED: meta.json unreadable (JSONDecodeError: " in out
    assert "`accel cache clear` removes it" in out
    assert main(["cache", "clear", "--dir", str(root)]) == 0
    assert "removed 1 cache entries" in capsys.readouterr().out and list(root.iterdir()) == []


@pytest.mark.slow
def test_clear_leaves_a_build_in_progress_and_removes_a_dead_one(tmp_path, capsys, monkeypatch):
    root = tmp_path / "cache"
    dead = root / f"imgs-0123{cache.TMP_MARK}99999"  # a build whose process died: its lock is free
    dead.mkdir(parents=True)
    decode, said = cache._decode_into, {}

    def clear_meanwhile(dataset, folder):
        assert main(["cache", "clear", "--dir", str(root)]) == 0  # another process's `accel cache clear`
        said["clear"] = capsys.readouterr().out
        assert main(["cache", "info", "--dir", str(root)]) == 0
        said["info"] = capsys.readouterr().out
        return decode(dataset, folder)

    monkeypatch.setattr(cache, "_decode_into", clear_meanwhile)
    data = folder_dataset(tmp_path / "images")
    out = cached(data, CacheConfig(enabled=True, dir=str(root)), "imgs")  # the build completes
    assert decoded(out)[0].equal(decoded(data)[0])
    assert "removed 1 cache entries" in said["clear"] and not dead.exists()
    assert f"left {root}/imgs-" in said["clear"] and "another process is building it now" in said["clear"]
    assert "being built now (by another process)" in said["info"]


def test_ctrl_c_during_cache_build_exits_130_and_leaves_no_half_entry(
    tmp_path, tiny, write_recipe, capsys, monkeypatch
):
    import signal

    write_images(tmp_path / "images", {"a": 3, "b": 3}, fmt="jpg")
    tiny["data"] = {
        "dataset": {"name": "imagefolder", "root": str(tmp_path / "images"), "image_size": 8},
        "batch_size": 2,
        "cache": {"enabled": True, "dir": str(tmp_path / "cache")},
    }
    decode = cache._decode_into

    def ctrl_c_while_decoding(dataset, folder):
        os.kill(os.getpid(), signal.SIGINT)
        return decode(dataset, folder)

    monkeypatch.setattr(cache, "_decode_into", ctrl_c_while_decoding)
    assert main(["cache", "build", str(write_recipe(tiny))]) == 130
    err = capsys.readouterr().err
    assert "interrupted: the entry being built was removed" in err and "Traceback" not in err
    assert list((tmp_path / "cache").iterdir()) == []
