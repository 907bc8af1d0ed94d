"""The four input pipelines `accel bench-data` compares, each over the same training images of an image-folder
recipe:

  plain  torchvision.datasets.ImageFolder + PIL transforms, DataLoader defaults (what most scripts do)
  tuned  accel's loader: torchvision.io decoding, `auto` workers capped to one thread each, prefetch_factor
  cache  accel's decoded cache: a memory map of the decoded, resized images (build time reported apart)
  dali   NVIDIA DALI: file reader, decoder (`cpu` here, `mixed` on a GPU), resize, crop-mirror-normalise
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from ..config.recipe import Recipe
from ..data.cache import CacheConfig, cached
from ..data.loaders import LoaderConfig, build_loader
from ..data.sampler import EpochSampler
from ..errors import AccelError
from ..registry import DATASETS

PIPELINES = ("plain", "tuned", "cache", "dali")


def make_loaders(
    recipe: Recipe, only: list[str], device: torch.device, plain_workers: int = 0, cache_dir: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """name -> loader (or the error that stopped it), and facts for the report (workers, cache build time)."""
    cfg = recipe.data.dataset
    if cfg.name != "imagefolder":
        raise AccelError(f"accel bench-data measures image-folder pipelines; recipe {recipe.name} uses `{cfg.name}`.")
    unknown = sorted(set(only) - set(PIPELINES))
    if unknown:
        raise AccelError(f"--only: unknown pipeline(s) {', '.join(unknown)}; choose from {', '.join(PIPELINES)}.")
    train = DATASETS.get("imagefolder").build(cfg, recipe.seed).train
    batch, loaders, facts = recipe.data.batch_size, {}, {"samples": len(train), "image_size": cfg.image_size}
    files = {str(Path(path)) for path, _ in train.samples}
    # each round starts its own workers (untimed warm-up), so idle pipelines never decode in the background
    loader_cfg = recipe.data.loader.model_copy(update={"persistent_workers": False})
    builders = {
        "plain": lambda: plain_loader(cfg.root, files, cfg.image_size, batch, plain_workers),
        "tuned": lambda: accel_loader(train, loader_cfg, batch, recipe.seed, device),
        "cache": lambda: _cache_loader(train, recipe, loader_cfg, device, cache_dir, facts),
        "dali": lambda: _dali_loader(train, recipe, device),
    }
    for name in only:
        try:
            loaders[name] = builders[name]()
            facts[f"{name}_workers"] = getattr(loaders[name], "num_workers", None)
        except Exception as err:  # a pipeline that cannot run here is a row with its reason, not a crash
            loaders[name] = err
    return loaders, facts


def plain_loader(root: str, files: set[str], size: int, batch_size: int, workers: int):
    """torchvision's ImageFolder over the same training files, decoded with PIL."""
    from torchvision import datasets, transforms

    tf = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size), transforms.PILToTensor()])
    folder = Path(root) / "train" if (Path(root) / "train").is_dir() else Path(root)
    data = datasets.ImageFolder(
        str(folder), transform=tf, allow_empty=True, is_valid_file=lambda path: str(Path(path)) in files
    )
    return torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=True, num_workers=workers)


def accel_loader(dataset, loader_cfg: LoaderConfig, batch_size: int, seed: int, device: torch.device):
    sampler = EpochSampler(len(dataset), shuffle=True, seed=seed)
    return build_loader(
        dataset, loader_cfg, batch_size=batch_size, sampler=sampler, drop_last=False, seed=seed, device=device
    )


def _cache_loader(train, recipe: Recipe, loader_cfg: LoaderConfig, device, cache_dir: str | None, facts: dict):
    cache_cfg = CacheConfig(enabled=True, dir=cache_dir or recipe.data.cache.dir)
    start = time.perf_counter()
    data = cached(train, cache_cfg, "bench-train")
    facts["cache_ready_s"] = round(time.perf_counter() - start, 3)  # build, or look-up when it exists
    return accel_loader(data, loader_cfg, recipe.data.batch_size, recipe.seed, device)


def _dali_loader(train, recipe: Recipe, device: torch.device):
    from ..data.dali import dali_loader
    from ..devices import available_cpus

    return dali_loader(
        train,
        batch_size=recipe.data.batch_size,
        train=True,
        drop_last=False,
        seed=recipe.seed,
        device=device,
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
        num_threads=available_cpus(),
    )
