"""The device prefetcher: exactly the loader's batches, in order, with and without it; threads end; errors surface."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import pytest
import torch

from accel.callbacks.data_wait import DataWaitWarning, suggestions
from accel.config.recipe import validate_recipe
from accel.data.datasets import ImageFileDataset, ImageFolder
from accel.data.loaders import LoaderConfig, build_loader
from accel.data.normalize import Normalize
from accel.data.prefetch import DevicePrefetcher, PrefetchConfig, resolve_prefetch, wrap_loader
from accel.data.sampler import EpochSampler
from accel.errors import DataError
from accel.runs.records import FitSummary
from accel.train.run import build_trainer
from conftest import cuda_only

from .test_datasets import write_images
from .test_loaders import memory_dataset

CPU = torch.device("cpu")


def loader_and_sampler(num_workers: int = 0):
    data = memory_dataset()
    sampler = EpochSampler(len(data), shuffle=True, seed=0)
    cfg = LoaderConfig(num_workers=num_workers, persistent_workers=False)
    return build_loader(data, cfg, batch_size=6, sampler=sampler, drop_last=False, seed=0, device=CPU), sampler


def epochs(loader, sampler, transform=None, n: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for epoch in range(n):
        sampler.set_epoch(epoch)
        out += [transform(*b) if transform else tuple(b) for b in loader]
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
def test_same_batches_with_and_without_the_prefetcher(num_workers):
    loader, sampler = loader_and_sampler(num_workers)
    normalize = Normalize([0.5], [0.25])
    plain = epochs(loader, sampler, normalize)  # what the trainer does without it: copy, then normalise
    fetched = epochs(DevicePrefetcher(loader, CPU, Normalize([0.5], [0.25]), depth=2), sampler)
    assert len(plain) == len(fetched) == 2 * 6
    for (xa, ya), (xb, yb) in zip(plain, fetched):
        assert xb.dtype == torch.float32 and torch.equal(xa, xb) and torch.equal(ya, yb)


def test_wraps_transparently():
    loader, sampler = loader_and_sampler()
    wrapped = DevicePrefetcher(loader, CPU)
    assert len(wrapped) == len(loader) and wrapped.sampler is sampler and wrapped.batch_size == 6
    assert wrapped.num_workers == 0 and wrapped.dataset is loader.dataset
    assert resolve_prefetch(PrefetchConfig(), torch.device("cuda")) is True
    assert resolve_prefetch(PrefetchConfig(), CPU) is False
    assert resolve_prefetch(PrefetchConfig(enabled=True), CPU) is True
    assert wrap_loader(loader, PrefetchConfig(), CPU, None) is loader
    assert isinstance(wrap_loader(loader, PrefetchConfig(enabled=True), CPU, None), DevicePrefetcher)


def test_an_early_stop_ends_the_thread():
    loader, sampler = loader_and_sampler()
    before = {t for t in threading.enumerate() if t.name == "accel-prefetch"}
    iterator = iter(DevicePrefetcher(loader, CPU, depth=1))
    next(iterator)
    assert {t for t in threading.enumerate() if t.name == "accel-prefetch"} - before  # it is running
    iterator.close()  # what dropping the iterator after `break` does
    assert not {t for t in threading.enumerate() if t.name == "accel-prefetch"} - before


def test_a_worker_error_reaches_the_consumer_with_the_file_name(tmp_path):
    write_images(tmp_path, {"a": 3}, fmt="jpg")
    (tmp_path / "a" / "2.jpg").write_bytes(b"\xff\xd8\xff truncated")
    data = ImageFolder.build(ImageFolder.Config(name="imagefolder", root=str(tmp_path), val_fraction=0.0), 0).train
    cfg = LoaderConfig(num_workers=1, persistent_workers=False)
    loader = build_loader(data, cfg, batch_size=1, sampler=None, drop_last=False, seed=0, device=CPU)
    with pytest.raises(DataError, match="2.jpg"):
        list(DevicePrefetcher(loader, CPU))


@pytest.mark.slow
def test_training_with_the_prefetcher_equals_training_without(tiny):
    """Batch for batch through the real trainer: identical losses and weights."""
    results = []
    for enabled in (False, True):
        recipe = validate_recipe({**tiny, "data": {**tiny["data"], "prefetch": {"enabled": enabled}}})
        trainer = build_trainer(recipe)
        assert isinstance(trainer.train_loader, DevicePrefetcher) == enabled
        summary = trainer.fit()
        results.append((summary["metrics"], [p.detach().clone() for p in trainer.module.parameters()]))
    assert results[0][0] == results[1][0]
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1]))


@pytest.mark.slow
def test_a_data_bound_run_gets_one_warning_with_suggestions(tiny, caplog):
    recipe = validate_recipe(tiny)
    for threshold, warnings in ((0.0, 1), (1.0, 0)):  # every run waits more than 0%, none more than 100%
        caplog.clear()
        trainer = build_trainer(recipe, extra_callbacks=[DataWaitWarning(recipe.data, threshold=threshold)])
        with caplog.at_level(logging.WARNING, logger="accel"):
            trainer.fit()  # two epochs: still one warning
        assert caplog.text.count("data-bound") == warnings
        assert ("data.batch_size" in caplog.text) == bool(warnings)  # the generic suggestion comes with it


def test_suggestions_fit_the_recipe_and_device(tiny):
    tiny["data"]["dataset"] = {"name": "imagefolder", "root": "/nowhere"}
    data = validate_recipe(tiny).data
    files = ImageFileDataset([("/nowhere/a/0.jpg", 0)], ["a"], 8)
    on = lambda device, workers: SimpleNamespace(  # noqa: E731
        train_loader=SimpleNamespace(dataset=files, num_workers=workers), device=torch.device(device)
    )
    cpu_tips = " ".join(suggestions(data, on("cpu", 0)))
    assert "num_workers" in cpu_tips and "data.cache.enabled: true" in cpu_tips and "dali" not in cpu_tips
    assert "prefetch_factor" not in cpu_tips  # without workers nothing prefetches
    data.prefetch.enabled = False
    cuda_tips = " ".join(suggestions(data, on("cuda", 2)))
    assert "num_workers" not in cuda_tips and "data.prefetch.enabled" in cuda_tips and "backend: dali" in cuda_tips
    assert "prefetch_factor" in cuda_tips


@cuda_only
def test_cuda_side_stream_gives_the_same_batches():
    cuda = torch.device("cuda")
    loader, sampler = loader_and_sampler()
    loader.pin_memory = True
    plain = [
        tuple(t.cpu() for t in Normalize([0.5], [0.25])(x.to(cuda), y.to(cuda)))
        for x, y in epochs(loader, sampler, n=1)
    ]
    fetched = [
        tuple(t.cpu() for t in b)
        for b in epochs(DevicePrefetcher(loader, cuda, Normalize([0.5], [0.25])), sampler, n=1)
    ]
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(plain, fetched))


def test_a_failed_run_gets_no_data_bound_warning(tiny, caplog):
    recipe = validate_recipe(tiny)
    trainer = build_trainer(recipe, extra_callbacks=[DataWaitWarning(recipe.data, threshold=0.0)])
    with caplog.at_level(logging.WARNING, logger="accel"):
        failed = {"status": "failed", "metrics": {}, "samples_per_s": None, "wall_s": 1.0, "device": "cpu"}
        summary = FitSummary(**failed, steps=0, epochs=0, data_wait_fraction=0.9)
        trainer.callbacks[-1].on_fit_end(trainer, summary)
    assert "data-bound" not in caplog.text
