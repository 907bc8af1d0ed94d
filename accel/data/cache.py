"""A decoded-dataset cache: decode and resize an image dataset once into a memory-mapped uint8 array.

An entry is a folder `<name>-<fingerprint>/` holding `images.npy` (N, C, H, W uint8), `labels.npy` and
`meta.json`. The fingerprint hashes the preprocessing settings and, for every source file, its path, label,
size and modification time: a changed file or setting gives a new fingerprint and so a rebuild. An entry is
written under a temporary name and renamed into place when complete, so a half-written cache is never read.
Later runs, and every epoch, index the memory map instead of decoding again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field
from torch.utils.data import DataLoader, Dataset

from ..devices import available_cpus
from ..errors import DataError
from ..runs.runlock import RunDirBusy, RunDirLock, check_free
from ..schema import StrictModel
from .datasets.memory import TensorImageDataset
from .loaders import worker_init

log = logging.getLogger("accel")
FORMAT = 1  # bump when the entry layout changes: old entries then simply stop matching
TMP_MARK = ".tmp-"


class CacheConfig(StrictModel):
    """Decode the dataset's images once and train from the decoded copy."""

    enabled: bool = Field(
        False,
        description="Read samples from the decoded cache, building it first if it is "
        "missing or stale. Worth it when decoding dominates: JPEG folders, slow disks.",
    )
    dir: str | None = Field(
        None,
        description="Folder holding the cache entries. Default: $ACCEL_CACHE_DIR, else "
        "$XDG_CACHE_HOME/accel/decoded, else ~/.cache/accel/decoded.",
    )


def cache_dir(cfg_dir: str | None = None) -> Path:
    """The configured folder, or the default described on CacheConfig.dir."""
    if cfg_dir:
        return Path(cfg_dir).expanduser()
    if os.environ.get("ACCEL_CACHE_DIR"):
        return Path(os.environ["ACCEL_CACHE_DIR"]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "accel" / "decoded"


def fingerprint(dataset: Any) -> str:
    """Hex digest of the dataset's preprocessing settings and of every source file's path, label, size, mtime."""
    digest = hashlib.sha256(json.dumps({"format": FORMAT, **dataset.cache_key()}, sort_keys=True).encode())
    for path, label in dataset.samples:
        try:
            stat = os.stat(path)
        except OSError as err:
            raise DataError(f"cache: cannot read {path} ({err}); the dataset changed since it was scanned.") from err
        digest.update(f"{os.path.abspath(path)}\0{label}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def cacheable(dataset: Any) -> bool:
    """Datasets that decode files per sample declare `samples` and `cache_key()`."""
    return hasattr(dataset, "cache_key") and hasattr(dataset, "samples")


def _writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f"{TMP_MARK}probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise DataError(
            f"cache: the folder {folder} is not writable ({err.strerror or err}). Set `data.cache.dir` "
            "to a writable folder (or $ACCEL_CACHE_DIR), or turn the cache off with "
            "`data.cache.enabled: false`."
        ) from err


class _Decoding(Dataset):
    """Yields each sample plus how many unreadable files the dataset skipped to produce it."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        before = getattr(self.dataset, "skipped", 0)  # per process: each worker has its own counter
        image, label = self.dataset[index]
        return image, label, getattr(self.dataset, "skipped", 0) - before


def _decode_into(dataset: Any, folder: Path) -> dict[str, Any]:
    """Decode every sample (all cores, in order) into folder/images.npy and labels.npy; return the meta."""
    workers = min(available_cpus(), max(len(dataset) // 64, 1))
    loader = DataLoader(
        _Decoding(dataset),
        batch_size=64,
        num_workers=workers if workers > 1 else 0,
        worker_init_fn=worker_init if workers > 1 else None,
    )
    images = labels = None
    start = skipped = 0
    for batch, batch_labels, batch_skipped in loader:
        if batch.dtype != torch.uint8:  # numpy would keep only each value's low byte: wrong pixels, no error
            raise DataError(
                f"cache: samples {start}..{start + len(batch) - 1} are {batch.dtype} images; the cache holds uint8 "
                "(the dataset must decode to 8-bit pixels)."
            )
        if images is None:  # the shape comes from the first sample; the dataset guarantees one shape
            shape = (len(dataset), *batch.shape[1:])
            images = np.lib.format.open_memmap(folder / "images.npy", mode="w+", dtype=np.uint8, shape=shape)
            labels = np.empty(len(dataset), dtype=np.int64)
        images[start : start + len(batch)] = batch.numpy()
        labels[start : start + len(batch)] = batch_labels.numpy()
        start, skipped = start + len(batch), skipped + int(batch_skipped.sum())
    if images is None:
        raise DataError("cache: the dataset has no samples to cache.")
    images.flush()
    np.save(folder / "labels.npy", labels)
    if skipped:
        log.warning("cache: %d unreadable image(s) were skipped (each replaced by the next readable one)", skipped)
    return {"samples": len(dataset), "shape": list(images.shape[1:]), "skipped": skipped}


def build_entry(dataset: Any, root: Path, name: str, key: str) -> Path:
    """Decode `dataset` into a new entry under `root`, written under a temporary name and then renamed. The
    temporary folder is locked while it is built, so `clear` leaves it alone (the OS frees the lock of a
    process that died: its leftover is cleared)."""
    final = root / f"{name}-{key[:20]}"
    tmp = root / f"{final.name}{TMP_MARK}{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with RunDirLock(tmp):
        return _build_in(dataset, tmp, final, name, key)


def _build_in(dataset: Any, tmp: Path, final: Path, name: str, key: str) -> Path:
    started = time.perf_counter()
    try:
        meta = _decode_into(dataset, tmp)
        meta.update(
            name=name,
            fingerprint=key,
            format=FORMAT,
            settings=dataset.cache_key(),
            build_s=round(time.perf_counter() - started, 3),
            created=time.strftime("%Y-%m-%dT%H:%M:%S"),
        )
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            tmp.rename(final)
        except OSError:  # another process (a second rank) finished the same entry first: use theirs
            if not (final / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("cache: decoded %d samples into %s in %.1f s", meta["samples"], final, meta["build_s"])
    return final


def ensure_entry(dataset: Any, root: Path, name: str) -> Path:
    """The complete entry for the dataset as it is now, built first when missing."""
    key = fingerprint(dataset)
    folder = root / f"{name}-{key[:20]}"
    if (folder / "meta.json").is_file():
        return folder
    _writable(root)
    return build_entry(dataset, root, name, key)


def load_entry(folder: Path) -> TensorImageDataset:
    """An entry as an in-memory-style dataset over a copy-on-write memory map (pages shared, never written)."""
    images = np.load(folder / "images.npy", mmap_mode="c")
    labels = np.load(folder / "labels.npy")
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    return TensorImageDataset(torch.from_numpy(images), torch.from_numpy(labels))


def cached(dataset: Any, cfg: CacheConfig, name: str) -> Any:
    """The decoded cache of `dataset` (built if missing or stale), or `dataset` when there is nothing to cache."""
    if not cacheable(dataset):
        log.info("cache: %s is already decoded in memory; nothing to cache", name)
        return dataset
    folder = ensure_entry(dataset, cache_dir(cfg.dir), name)
    try:
        return load_entry(folder)
    except (OSError, ValueError) as err:  # a damaged entry (e.g. a deleted file) is rebuilt, not trusted
        log.warning("cache: rebuilding damaged entry %s (%s)", folder, err)
        shutil.rmtree(folder, ignore_errors=True)
        return load_entry(ensure_entry(dataset, cache_dir(cfg.dir), name))


def entries(root: Path) -> list[dict[str, Any]]:
    """meta.json of every complete entry under `root`, with its folder and size on disk; an entry whose meta.json
    cannot be read holds `damaged` (why) instead, as one being built holds `building`."""
    found = []
    for meta_file in sorted(root.glob("*/meta.json")) if root.is_dir() else []:
        if TMP_MARK in meta_file.parent.name:
            continue
        size = sum(f.stat().st_size for f in meta_file.parent.iterdir())
        place = {"path": str(meta_file.parent), "size_mb": round(size / 2**20, 1)}
        try:
            meta = json.loads(meta_file.read_text())
            describe(meta | place)  # every field the listing needs is there
        except (OSError, ValueError, TypeError, KeyError) as err:
            found.append({**place, "damaged": f"meta.json unreadable ({type(err).__name__}: {err})"})
            continue
        found.append({**meta, **place})
    return found + [{"path": str(p), "building": True} for p in _building(root)]


def _building(root: Path) -> list[Path]:
    """Temporary folders whose build is in progress (their lock is held)."""
    return [p for p in _temporary(root) if _locked(p)]


def _temporary(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and TMP_MARK in p.name) if root.is_dir() else []


def _locked(folder: Path) -> bool:
    try:
        check_free(folder, "a cache entry")
    except RunDirBusy:
        return True
    return False


def clear(root: Path) -> tuple[int, list[Path]]:
    """Remove every entry (damaged ones too) and every temporary folder a dead build left under `root`; return
    how many folders went, and the builds in progress, which are left alone (deleting one crashed its build)."""
    removed, building = 0, _building(root)
    for folder in root.iterdir() if root.is_dir() else []:
        if folder in building or not folder.is_dir():
            continue
        if (folder / "meta.json").is_file() or TMP_MARK in folder.name:
            shutil.rmtree(folder)
            removed += 1
    return removed, building


def build_for_recipe(recipe: Any) -> list[Path]:
    """Build (or find) the cache entries of a recipe's train and val splits; return their folders."""
    from ..registry import DATASETS

    splits = DATASETS.get(recipe.data.dataset.name).build(recipe.data.dataset, recipe.seed)
    root = cache_dir(recipe.data.cache.dir)
    return [
        ensure_entry(dataset, root, f"{recipe.data.dataset.name}-{split}")
        for split, dataset in (("train", splits.train), ("val", splits.val))
        if dataset is not None and cacheable(dataset)
    ]


def describe(entry: dict[str, Any]) -> str:
    """One line per entry for `accel cache info`."""
    if entry.get("building"):
        return f"{entry['path']}  being built now (by another process)"
    if "damaged" in entry:
        return f"{entry['path']}  DAMAGED: {entry['damaged']}; `accel cache clear` removes it ({entry['size_mb']} MB)"
    shape = "x".join(map(str, entry["shape"]))
    return (
        f"{entry['path']}  {entry['samples']} samples of {shape}  {entry['size_mb']} MB  "
        f"built {entry['created']} in {entry['build_s']} s"
    )
