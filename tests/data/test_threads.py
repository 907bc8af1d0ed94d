"""Loader workers as threads: the batches of worker processes, in order, through the prefetcher; threads end."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.utils.data import IterableDataset

from accel.config.recipe import load_recipe
from accel.data.datasets import ImageFolder
from accel.data.loaders import LoaderConfig, build_loader, resolve_workers_kind
from accel.data.normalize import Normalize
from accel.data.prefetch import DevicePrefetcher
from accel.data.sampler import EpochSampler
from accel.data.thread_loader import ThreadLoader
from accel.errors import DataError, RecipeError
from conftest import cuda_only, jpeg_folder

from .test_loaders import FileLike, memory_dataset

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    root = jpeg_folder(tmp_path_factory.mktemp("threads") / "jpegs")
    return ImageFolder.build(ImageFolder.Config(name="imagefolder", root=str(root), image_size=12), 0).train


def _loader(dataset, kind: str, device=CPU, **cfg):
    sampler = EpochSampler(len(dataset), shuffle=True, seed=3)
    cfg = LoaderConfig(num_workers=2, workers_kind=kind, prefetch_factor=2, persistent_workers=False, **cfg)
    loader = build_loader(dataset, cfg, batch_size=3, sampler=sampler, drop_last=False, seed=3, device=device)
    return loader, sampler


def _epochs(loader, sampler, n: int = 2) -> list[list[torch.Tensor]]:
    out = []
    for epoch in range(n):
        sampler.set_epoch(epoch)
        out += [list(batch) for batch in loader]
    return out


def _same(a: list[list[torch.Tensor]], b: list[list[torch.Tensor]]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for p, q in zip(a, b) for x, y in zip(p, q))


def test_threads_give_the_batches_of_worker_processes(jpegs):
    processes = _epochs(*_loader(jpegs, "processes"))
    loader, sampler = _loader(jpegs, "threads")
    assert isinstance(loader, ThreadLoader) and loader.threads == 2 and loader.ahead == 4
    assert len(loader) == 6 and loader.sampler is sampler
    threads = _epochs(loader, sampler)
    assert len(threads) == 2 * 6 and threads[0][0].shape == (3, 3, 12, 12)
    assert _same(processes, threads)
    assert not _same(threads[:6], threads[6:])  # the sampler's new epoch reached the threads: a new order


def test_threads_work_under_the_prefetcher(jpegs):
    loader, sampler = _loader(jpegs, "threads")
    plain = [Normalize([0.5], [0.25])(*batch) for batch in _epochs(loader, sampler, n=1)]
    fetched = _epochs(DevicePrefetcher(loader, CPU, Normalize([0.5], [0.25]), depth=2), sampler, n=1)
    assert _same([list(b) for b in plain], fetched)


@cuda_only
def test_threads_pin_their_batches_for_the_cuda_prefetcher(jpegs):
    cuda = torch.device("cuda")
    loader, sampler = _loader(jpegs, "threads", device=cuda)
    assert loader.pin_memory and all(t.is_pinned() for b in _epochs(loader, sampler, n=1) for t in b)
    fetched = [[t.cpu() for t in b] for b in _epochs(DevicePrefetcher(loader, cuda), sampler, n=1)]
    assert _same(_epochs(*_loader(jpegs, "processes"), n=1), fetched)


def _loader_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("accel-loader")}


def test_an_early_stop_ends_the_threads(jpegs):
    loader, _ = _loader(jpegs, "threads")
    before = _loader_threads()
    iterator = iter(loader)
    next(iterator)
    assert _loader_threads() - before
    iterator.close()  # what dropping the iterator after `break` does
    assert not _loader_threads() - before


def test_a_decode_error_in_a_thread_reaches_the_consumer(tmp_path):
    root = jpeg_folder(tmp_path / "jpegs")
    (root / "a" / "3.jpg").write_bytes(b"not a jpeg")
    data = ImageFolder.build(ImageFolder.Config(name="imagefolder", root=str(root), image_size=12), 0).train
    with pytest.raises(DataError, match="3.jpg"):
        list(_loader(data, "threads")[0])


def test_auto_picks_threads_for_decoded_files_and_processes_otherwise(jpegs):
    auto = LoaderConfig(workers_kind="auto")
    assert resolve_workers_kind(auto, jpegs) == "threads"
    assert resolve_workers_kind(auto, FileLike()) == "processes"
    assert resolve_workers_kind(auto, memory_dataset()) == "processes"
    assert resolve_workers_kind(LoaderConfig(), jpegs) == "processes"  # the default stays processes


def test_an_iterable_dataset_is_refused_and_a_bad_kind_is_named(tiny, write_recipe):
    class Stream(IterableDataset):
        def __iter__(self):
            yield from range(4)

    with pytest.raises(DataError, match="workers_kind: threads needs a dataset indexed by position"):
        ThreadLoader(Stream(), threads=2, prefetch_factor=2, batch_size=2)
    tiny["data"]["loader"] = {"workers_kind": "thread"}
    path = write_recipe(tiny)
    with pytest.raises(RecipeError, match=r"data\.loader\.workers_kind") as err:
        load_recipe(path)
    assert str(path.name) in str(err.value) and "threads" in str(err.value)
