"""From a recipe's `data:` section and a dataset's splits to what the trainer consumes: loaders and transforms.

Order, per training sample: (cached) decode -> CPU transforms (workers) -> collate [-> augment, `on: loader`]
-> copy to the device (prefetcher, when enabled) -> uint8 -> float normalisation -> augment (`on: device`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from pydantic import Field, SerializeAsAny

from ..callbacks.base import Callback
from ..devices import available_cpus
from ..errors import DataError
from ..schema import StrictModel
from .augment import AugmentConfig, AugmentState, BatchAugment, CollateAugment, build_augment
from .cache import CacheConfig, cached
from .cpu_transforms import CpuTransformsConfig, apply_cpu_transforms
from .loaders import LoaderConfig, build_loader
from .normalize import Normalize
from .prefetch import PrefetchConfig, wrap_loader
from .sampler import EpochSampler
from .splits import Splits


class DataConfig(StrictModel):
    dataset: SerializeAsAny[StrictModel] = Field(description="`name` of a registered dataset plus its options")
    batch_size: int = Field(128, ge=1, description="samples per micro-batch (per process)")
    eval_batch_size: int | None = Field(None, ge=1, description="batch size for evaluation; default: batch_size")
    drop_last: bool = Field(True, description="drop the last incomplete training batch (steady shapes suit compile)")
    loader: LoaderConfig = Field(default_factory=LoaderConfig, description="DataLoader tuning")
    augment: AugmentConfig = Field(
        default_factory=AugmentConfig,
        description="batch augmentation: random crop, "
        "flip, cutout, mixup, cutmix, on the device or in the loader workers",
    )
    transforms: CpuTransformsConfig = Field(
        default_factory=CpuTransformsConfig,
        description="per-sample CPU transforms on the training split (torchvision.transforms.v2, albumentations)",
    )
    cache: CacheConfig = Field(
        default_factory=CacheConfig, description="decode image files once into a memory-mapped cache"
    )
    prefetch: PrefetchConfig = Field(
        default_factory=PrefetchConfig,
        description="copy and normalise the next batch on the device while the current one computes",
    )


@dataclass
class DataPipeline:
    """The trainer's inputs: loaders plus the transforms it runs on each batch once it is on the device."""

    train_loader: Any
    val_loader: Any | None
    train_transform: Any
    eval_transform: Any
    callbacks: list[Callback] = field(default_factory=list)  # state the checkpoint must carry (augment RNG)


def _check_combination(data: DataConfig) -> None:
    if data.loader.backend != "dali":
        return
    clash = (
        "data.cache.enabled: true"
        if data.cache.enabled
        else "data.transforms"
        if not data.transforms.empty
        else "data.augment.on: loader"
        if data.augment.on == "loader" and data.augment.ops
        else None
    )
    if clash:
        raise DataError(
            f"`{clash}` works on the torch loader's samples, but `data.loader.backend: dali` decodes "
            "and batches the files itself. Use backend torch, or drop it (augment with `on: device`)."
        )


def prepare_splits(data: DataConfig, splits: Splits) -> Splits:
    """Splits read from the decoded cache (when enabled), training samples passed through the CPU transforms."""
    if data.loader.backend == "dali":
        return splits
    train, val = splits.train, splits.val
    if data.cache.enabled:
        name = data.dataset.name
        train = cached(train, data.cache, f"{name}-train")
        val = cached(val, data.cache, f"{name}-val") if val is not None else None
    return dataclasses.replace(splits, train=apply_cpu_transforms(train, data.transforms), val=val)


def _loader(
    data: DataConfig,
    dataset: Any,
    splits: Splits,
    *,
    train: bool,
    seed: int,
    device: torch.device,
    rank: int,
    world_size: int,
    collate_fn: Any = None,
) -> Any:
    batch_size = data.batch_size if train else (data.eval_batch_size or data.batch_size)
    if data.loader.backend == "dali":
        from .dali import dali_loader

        # one seed on every rank: the shards split one global permutation per epoch
        return dali_loader(
            dataset,
            batch_size=batch_size,
            train=train,
            drop_last=train and data.drop_last,
            seed=seed,
            device=device,
            mean=splits.mean,
            std=splits.std,
            rank=rank,
            world_size=world_size,
            num_threads=available_cpus(),
        )
    # training pads so every rank runs the same number of steps; evaluation counts each sample once
    sampler = EpochSampler(len(dataset), shuffle=train, seed=seed, rank=rank, world_size=world_size, pad=train)
    return build_loader(
        dataset,
        data.loader,
        batch_size=batch_size,
        sampler=sampler,
        drop_last=train and data.drop_last,
        seed=seed,
        device=device,
        collate_fn=collate_fn,
    )


def build_data_pipeline(
    data: DataConfig, splits: Splits, *, device: torch.device, seed: int, rank: int = 0, world_size: int = 1
) -> DataPipeline:
    """Loaders and batch transforms for a recipe's `data` section (a DataConfig) over `splits`."""
    _check_combination(data)
    if splits.tokens and (data.augment.ops or not data.transforms.empty or data.cache.enabled):
        raise DataError(
            f"data.augment, data.transforms and data.cache work on images, but dataset "
            f"`{data.dataset.name}` serves token ids: remove them from the recipe"
        )
    splits = prepare_splits(data, splits)
    augment: BatchAugment | None = None
    if data.augment.ops:
        augment = build_augment(data.augment, Normalize(splits.mean, splits.std), splits.num_classes, seed, rank)
    on_loader = augment is not None and data.augment.on == "loader"
    where = dict(splits=splits, seed=seed, device=device, rank=rank, world_size=world_size)
    train_loader = _loader(
        data, splits.train, train=True, collate_fn=CollateAugment(augment) if on_loader else None, **where
    )
    val_loader = _loader(data, splits.val, train=False, **where) if splits.val is not None else None
    # With the prefetcher, normalisation happens while the batch is copied; the trainer's Normalize then sees a
    # float batch and passes it through. Each loader gets its own Normalize: the thread caches device tensors.
    if data.loader.backend != "dali":  # DALI keeps its own queue of batches ready on the device
        train_loader = wrap_loader(train_loader, data.prefetch, device, _normalize(splits))
        val_loader = wrap_loader(val_loader, data.prefetch, device, _normalize(splits))
    on_device = augment if augment is not None and not on_loader else None
    normalize = _normalize(splits)
    return DataPipeline(
        train_loader,
        val_loader,
        train_transform=on_device or normalize,
        eval_transform=normalize,
        callbacks=[AugmentState(on_device, rank)] if on_device is not None else [],
    )


def _normalize(splits: Splits) -> Normalize | None:
    return Normalize(splits.mean, splits.std) if splits.images else None
