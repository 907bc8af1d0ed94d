#!/usr/bin/env python
"""Samples/s of the input pipeline alone (no model) for an image-folder recipe, four ways, side by side:

  plain  torchvision.datasets.ImageFolder + PIL transforms, DataLoader defaults (what most scripts do)
  tuned  accel's loader: torchvision.io decoding, `auto` workers capped to one thread each, prefetch_factor
  cache  accel's decoded cache: a memory map of the decoded, resized images (build time reported apart)
  dali   NVIDIA DALI: file reader, decoder (`cpu` here, `mixed` on a GPU), resize, crop-mirror-normalise

With `--device cuda` every pipeline feeds the GPU: each batch is copied there (from pinned memory where the
loader pins) and the clock stops only when the last copy has landed; DALI then decodes on the GPU itself.

Rounds interleave the pipelines (a b c d a b c d ...) so machine drift hits all alike; each pass starts fresh
(workers too) and its warm-up batches are not timed; the table shows the median round. Prints a table and
writes JSON with every round's numbers and the environment.

    python scripts/make_jpeg_folder.py data/jpeg-folder
    python benchmarks/bench_data.py imagefolder-jpeg --batches 40 --rounds 5 --out runs/bench-data.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from accel import devices  # noqa: E402
from accel.data.cache import CacheConfig, cached  # noqa: E402
from accel.data.loaders import LoaderConfig, build_loader  # noqa: E402
from accel.data.sampler import EpochSampler  # noqa: E402
from accel.errors import AccelError  # noqa: E402
from accel.recipe import load_recipe  # noqa: E402
from accel.registry import DATASETS  # noqa: E402

PIPELINES = ["plain", "tuned", "cache", "dali"]


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


def make_loaders(recipe, args) -> tuple[dict, dict]:
    """name -> loader (or the error that stopped it), and facts for the report (workers, cache build time)."""
    cfg = recipe.data.dataset
    if cfg.name != "imagefolder":
        raise AccelError(f"bench_data measures image-folder pipelines; {args.recipe} uses `{cfg.name}`.")
    train = DATASETS.get("imagefolder").build(cfg, recipe.seed).train
    batch, loaders, facts = recipe.data.batch_size, {}, {"samples": len(train), "image_size": cfg.image_size}
    files = {str(Path(path)) for path, _ in train.samples}
    # each round starts its own workers (untimed warm-up), so idle pipelines never decode in the background
    loader_cfg = recipe.data.loader.model_copy(update={"persistent_workers": False})
    builders = {
        "plain": lambda: plain_loader(cfg.root, files, cfg.image_size, batch, args.plain_workers),
        "tuned": lambda: accel_loader(train, loader_cfg, batch, recipe.seed, args.device),
        "cache": lambda: _cache_loader(train, recipe, args, facts),
        "dali": lambda: _dali_loader(train, recipe, args.device),
    }
    for name in args.only:
        try:
            loaders[name] = builders[name]()
            facts[f"{name}_workers"] = getattr(loaders[name], "num_workers", None)
        except Exception as err:  # a pipeline that cannot run here is a row with its reason, not a crash
            loaders[name] = err
    return loaders, facts


def _cache_loader(train, recipe, args, facts: dict):
    cache_cfg = CacheConfig(enabled=True, dir=args.cache_dir or recipe.data.cache.dir)
    start = time.perf_counter()
    data = cached(train, cache_cfg, "bench-train")
    facts["cache_ready_s"] = round(time.perf_counter() - start, 3)  # build, or look-up when it exists
    return accel_loader(
        data,
        recipe.data.loader.model_copy(update={"persistent_workers": False}),
        recipe.data.batch_size,
        recipe.seed,
        args.device,
    )


def _dali_loader(train, recipe, device: torch.device):
    from accel.data.dali import dali_loader
    from accel.devices import available_cpus

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


def measure(loader, warmup: int, count: int, device: torch.device) -> float:
    """Samples/s over up to `count` batches of a fresh pass, after `warmup` untimed ones (worker start-up),
    each batch delivered onto `device`."""
    batches = iter(loader)
    for _ in range(warmup):
        next(batches)
    count = max(1, min(count, len(loader) - warmup))  # stay in one epoch: no worker restart inside the timing
    samples, start = 0, time.perf_counter()
    for _ in range(count):
        images, labels = devices.to_device(next(batches), device, non_blocking=True)
        samples += len(labels)
    devices.synchronize(device)
    rate = samples / (time.perf_counter() - start)
    del batches  # workers (not persistent here) exit now instead of decoding while the next pipeline is timed
    return rate


def run_rounds(loaders: dict, args) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    for _ in range(args.rounds):
        for name, loader in loaders.items():
            if isinstance(loader, Exception):
                continue
            try:
                rates[name].append(measure(loader, args.warmup, args.batches, args.device))
            except Exception as err:  # e.g. plain PIL on a corrupt file: record it, keep the others going
                loaders[name] = err
    return rates


def report(rates: dict, loaders: dict, facts: dict) -> list[dict]:
    plain = statistics.median(rates["plain"]) if rates.get("plain") else None
    rows = []
    for name in loaders:
        error = loaders[name] if isinstance(loaders[name], Exception) else None
        values = rates.get(name) or []
        median = statistics.median(values) if values and error is None else None
        rows.append(
            {
                "pipeline": name,
                "samples_per_s": median,
                "rounds": values,
                "vs_plain": median / plain if median and plain else None,
                "workers": facts.get(f"{name}_workers"),
                "error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}" if error else None,
            }
        )
    return rows


def print_table(rows: list[dict], facts: dict) -> None:
    print(f"{'pipeline':8} {'workers':>7} {'samples/s':>10} {'vs plain':>9}  range / error")
    for row in rows:
        rate = f"{row['samples_per_s']:10.0f}" if row["samples_per_s"] else f"{'-':>10}"
        ratio = f"{row['vs_plain']:8.2f}x" if row["vs_plain"] else f"{'-':>9}"
        spread = f"{min(row['rounds']):.0f}-{max(row['rounds']):.0f}" if row["rounds"] and not row["error"] else ""
        print(
            f"{row['pipeline']:8} {str(row['workers'] if row['workers'] is not None else '-'):>7} {rate} {ratio}"
            f"  {row['error'] or spread}"
        )
    print(
        f"{facts['samples']} training images at {facts['image_size']} px; cache ready in "
        f"{facts.get('cache_ready_s', '-')} s (not counted above)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", help="an image-folder recipe, e.g. imagefolder-jpeg")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--batches", type=int, default=40, help="timed batches per pipeline per round (at most one epoch's worth)"
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches at the start of every pass")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median is reported")
    parser.add_argument(
        "--plain-workers",
        type=int,
        default=0,
        help="workers of the plain DataLoader (default 0, DataLoader's own default)",
    )
    parser.add_argument("--only", type=lambda s: s.split(","), default=PIPELINES, help="e.g. plain,cache")
    parser.add_argument("--cache-dir", help="decoded cache folder (default: the recipe's data.cache.dir)")
    parser.add_argument("--device", default="cpu", help="where batches are delivered: cpu (default), cuda, auto")
    parser.add_argument("--out", default="runs/bench-data.json", help="JSON report (default %(default)s)")
    args = parser.parse_args(argv)
    args.device = devices.resolve_device(args.device)
    try:
        loaders, facts = make_loaders(load_recipe(args.recipe, args.overrides), args)
    except AccelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows = report(run_rounds(loaders, args), loaders, facts)
    print_table(rows, facts)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "command": shlex.join(["python", "benchmarks/bench_data.py", *(argv or sys.argv[1:])]),
                "settings": {k: str(v) for k, v in vars(args).items()},
                "facts": facts,
                "rows": rows,
                "env": devices.environment(args.device),
            },
            indent=1,
        )
    )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
