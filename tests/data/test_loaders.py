"""build_loader and its `auto` choices; a real multi-worker loader over image files."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

from accel.data import loaders
from accel.data.datasets import ImageFolder, Synthetic
from accel.data.loaders import LoaderConfig, build_loader, resolve_num_workers, resolve_pin_memory
from accel.data.sampler import EpochSampler
from accel.errors import DataError

from .test_datasets import write_images

CPU = torch.device("cpu")


class FileLike(Dataset):
    """Stands in for a per-sample file dataset; reports what a worker's process looks like from inside."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        import numpy as np
        from threadpoolctl import threadpool_info

        blas = [pool["num_threads"] for pool in threadpool_info()]
        return torch.tensor([torch.get_num_threads(), max(blas, default=1), random.random(), np.random.rand()])


def memory_dataset():
    return Synthetic.build(Synthetic.Config(name="synthetic", num_samples=40, shape=[1, 4, 4]), 0).train


def test_config_fields_are_documented_and_strict():
    assert all(info.description for info in LoaderConfig.model_fields.values())
    with pytest.raises(ValueError):
        LoaderConfig(num_worker=2)
    with pytest.raises(ValueError):
        LoaderConfig(num_workers=-1)
    with pytest.raises(ValueError):
        LoaderConfig(prefetch_factor=0)


@pytest.mark.parametrize("cpus, expected", [(1, 1), (2, 1), (3, 2), (16, 4)])
def test_auto_workers_for_file_datasets(monkeypatch, cpus, expected):
    monkeypatch.setattr(loaders, "available_cpus", lambda: cpus)
    assert resolve_num_workers(LoaderConfig(), FileLike()) == expected


def test_auto_workers_zero_for_in_memory_and_explicit_wins():
    assert resolve_num_workers(LoaderConfig(), memory_dataset()) == 0
    assert resolve_num_workers(LoaderConfig(num_workers=3), memory_dataset()) == 3
    assert resolve_num_workers(LoaderConfig(num_workers=0), FileLike()) == 0


def test_pin_memory_auto_only_for_cuda():
    assert resolve_pin_memory(LoaderConfig(), CPU) is False
    assert resolve_pin_memory(LoaderConfig(), torch.device("cuda", 0)) is True
    assert resolve_pin_memory(LoaderConfig(pin_memory=False), torch.device("cuda")) is False
    assert resolve_pin_memory(LoaderConfig(pin_memory=True), CPU) is True


def test_in_memory_loader_follows_the_sampler():
    data = memory_dataset()
    sampler = EpochSampler(len(data), shuffle=True, seed=0)
    loader = build_loader(data, LoaderConfig(), batch_size=8, sampler=sampler, drop_last=True, seed=0, device=CPU)
    assert loader.num_workers == 0 and loader.pin_memory is False
    images, labels = next(iter(loader))
    first = list(sampler)[:8]
    assert images.dtype == torch.uint8 and images.shape == (8, 1, 4, 4) and labels.dtype == torch.int64
    assert torch.equal(images, data.images[first]) and torch.equal(labels, data.labels[first])
    assert len(loader) == len(data) // 8


def test_workers_are_single_threaded_and_seeded_from_seed():
    cfg = LoaderConfig(num_workers=2, persistent_workers=False)
    runs = [
        torch.cat(
            list(build_loader(FileLike(), cfg, batch_size=2, sampler=None, drop_last=False, seed=seed, device=CPU))
        )
        for seed in (5, 5, 6)
    ]
    assert runs[0][:, :2].eq(1).all()  # torch and BLAS pools capped to one thread per worker
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0][:, 2:], runs[2][:, 2:])
    assert len(set(runs[0][:, 2].tolist())) == 8  # workers do not share a python RNG stream


def test_two_workers_over_imagefolder(tmp_path):
    write_images(tmp_path / "train", {"a": 5, "b": 4}, fmt="jpg")
    write_images(tmp_path / "val", {"a": 1, "b": 1})
    splits = ImageFolder.build(ImageFolder.Config(name="imagefolder", root=str(tmp_path), image_size=12), 0)
    cfg = LoaderConfig(num_workers=2, prefetch_factor=1)
    sampler = EpochSampler(len(splits.train), shuffle=True, seed=0)
    loader = build_loader(splits.train, cfg, batch_size=4, sampler=sampler, drop_last=False, seed=0, device=CPU)
    assert loader.num_workers == 2 and loader.persistent_workers and loader.prefetch_factor == 1
    for epoch in range(2):
        sampler.set_epoch(epoch)
        batches = list(loader)
        assert [b[0].shape for b in batches] == [(4, 3, 12, 12), (4, 3, 12, 12), (1, 3, 12, 12)]
        assert all(b[0].dtype == torch.uint8 for b in batches)
        labels = torch.cat([b[1] for b in batches])
        assert sorted(labels.tolist()) == [0] * 5 + [1] * 4
        assert labels.tolist() == [splits.train.samples[i][1] for i in sampler]


HANGING_UP = """
import os, signal, torch
from accel.data.loaders import LoaderConfig, build_loader

class HangsUp(torch.utils.data.Dataset):
    # each item signals its worker as a closed terminal's shell signals every process of the job
    def __len__(self):
        return 4

    def __getitem__(self, index):
        if torch.utils.data.get_worker_info() is not None:  # never the loop's own process
            os.kill(os.getpid(), signal.SIGHUP)
        return torch.tensor([index])

batches = build_loader(HangsUp(), LoaderConfig(num_workers=1, persistent_workers=False), batch_size=2, sampler=None,
                       drop_last=False, seed=0, device=torch.device("cpu"))
print(torch.cat(list(batches)).flatten().tolist())
"""


@pytest.mark.slow
def test_workers_outlive_the_sighup_that_stops_the_run():
    """The training process stops on SIGHUP and saves (accel/runs/signals.py); a worker killed by it first would end
    the loop with "DataLoader worker ... killed by signal: Hangup" before it could. In a fresh process: forked from
    the test process, after hundreds of tests' threads, a worker once died of a segmentation fault at its start."""
    done = _python(HANGING_UP)
    assert done.returncode == 0 and done.stdout.split() == ["[0,", "1,", "2,", "3]"], done.stderr


WORKER_IMPORTS = """
import sys, torch
from accel.data.loaders import LoaderConfig, build_loader

class Imports(torch.utils.data.Dataset):
    def __len__(self):
        return 1

    def __getitem__(self, index):
        return torch.tensor(["cv2" in sys.modules])

batches = build_loader(Imports(), LoaderConfig(num_workers=1, persistent_workers=False), batch_size=1, sampler=None,
                       drop_last=False, seed=0, device=torch.device("cpu"))
print("cv2 in the worker:", bool(next(iter(batches))), "in the process:", "cv2" in sys.modules)
"""


@pytest.mark.slow
def test_a_worker_loads_no_native_library_the_process_had_not():
    """A native library imported in a worker forked from a process with live threads can deadlock or crash there
    (a lock held by a thread the child lacks): the worker's setup uses only what the process loaded."""
    done = _python(WORKER_IMPORTS)
    assert done.returncode == 0 and "cv2 in the worker: False in the process: False" in done.stdout, done.stderr


def test_corrupt_image_in_a_worker_is_still_a_data_error(tmp_path):
    write_images(tmp_path, {"a": 2}, fmt="jpg")
    (tmp_path / "a" / "1.jpg").write_bytes(b"\xff\xd8\xff not really a jpeg")
    data = ImageFolder.build(ImageFolder.Config(name="imagefolder", root=str(tmp_path), val_fraction=0.0), 0).train
    cfg = LoaderConfig(num_workers=1, persistent_workers=False)
    with pytest.raises(DataError, match="1.jpg"):
        list(build_loader(data, cfg, batch_size=2, sampler=None, drop_last=False, seed=0, device=CPU))


CRASHING_WORKER = """
import ctypes, torch
from accel.data.loaders import LoaderConfig, build_loader

class Crashes(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, index):
        return decode_in_native_code()

def decode_in_native_code():
    return ctypes.string_at(0)  # reads address 0: a segmentation fault, as a broken native decoder gives

list(build_loader(Crashes(), LoaderConfig(num_workers=1), batch_size=2, sampler=None, drop_last=False, seed=0,
                  device=torch.device("cpu")))
"""


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_a_worker_that_crashes_in_native_code_prints_where():
    """torch reports only that a worker died; accel's workers also print the Python stack of the crash."""
    done = _python(CRASHING_WORKER)
    assert done.returncode != 0 and "Segmentation fault" in done.stderr
    assert "decode_in_native_code" in done.stderr and "__getitem__" in done.stderr, done.stderr
