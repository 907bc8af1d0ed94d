"""Samples/s of input pipelines alone (no model). Rounds interleave the pipelines (a b c d a b c d ...) so machine
drift hits all alike; each pass starts fresh (workers too) and its warm-up batches are not timed; a pipeline's
figure is its median round. On a GPU each batch is copied there and the clock stops when the last copy landed."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from .. import devices


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


def run_rounds(loaders: dict[str, Any], rounds: int, warmup: int, batches: int, device) -> dict[str, list[float]]:
    """Each pipeline's rate per round; a pipeline that fails is replaced in `loaders` by its error."""
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    for _ in range(rounds):
        for name, loader in loaders.items():
            if isinstance(loader, Exception):
                continue
            try:
                rates[name].append(measure(loader, warmup, batches, device))
            except Exception as err:  # e.g. plain PIL on a corrupt file: record it, keep the others going
                loaders[name] = err
    return rates


def rows(rates: dict[str, list[float]], loaders: dict[str, Any], facts: dict[str, Any]) -> list[dict[str, Any]]:
    plain = statistics.median(rates["plain"]) if rates.get("plain") else None
    table = []
    for name, loader in loaders.items():
        error = loader if isinstance(loader, Exception) else None
        values = rates.get(name) or []
        median = statistics.median(values) if values and error is None else None
        table.append(
            {
                "pipeline": name,
                "samples_per_s": median,
                "rounds": values,
                "vs_plain": median / plain if median and plain else None,
                "workers": facts.get(f"{name}_workers"),
                "error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}" if error else None,
            }
        )
    return table


def render(table: list[dict[str, Any]], facts: dict[str, Any]) -> str:
    lines = [f"{'pipeline':8} {'workers':>7} {'samples/s':>10} {'vs plain':>9}  range / error"]
    for row in table:
        rate = f"{row['samples_per_s']:10.0f}" if row["samples_per_s"] else f"{'-':>10}"
        ratio = f"{row['vs_plain']:8.2f}x" if row["vs_plain"] else f"{'-':>9}"
        spread = f"{min(row['rounds']):.0f}-{max(row['rounds']):.0f}" if row["rounds"] and not row["error"] else ""
        workers = str(row["workers"] if row["workers"] is not None else "-")
        lines.append(f"{row['pipeline']:8} {workers:>7} {rate} {ratio}  {row['error'] or spread}")
    lines.append(
        f"{facts['samples']} training images at {facts['image_size']} px; cache ready in "
        f"{facts.get('cache_ready_s', '-')} s (not counted above)"
    )
    return "\n".join(lines)
