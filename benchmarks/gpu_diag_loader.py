#!/usr/bin/env python
"""Time the CUDA recipe's input pipeline alone, in one process, before and after a torch.compile of its model.

Written on an H100 to answer one question: is the DataLoader why the compiled ResNet-18 preset waits 56% of
each step for data? Each line is the p50/p90/max of 60 fetches from the device prefetcher (or the bare
DataLoader, pinning included), after: a fresh start, an eager bf16 step, compilation, 5 s idle, gc.freeze(),
gc disabled, 4 and 1 torch threads; then the busiest processes. Output in docs/gpu/h100-2026-11-22.json.

    python benchmarks/gpu_diag_loader.py          # needs CUDA
"""

from __future__ import annotations

import gc
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from accel.config.recipe import load_recipe  # noqa: E402
from accel.data.pipeline import build_data_pipeline  # noqa: E402
from accel.models import build_model  # noqa: E402
from accel.registry import DATASETS  # noqa: E402

FETCHES = 60


def fetch_times_ms(loader, sync: bool) -> list[float]:
    batches, times = iter(loader), []
    for _ in range(FETCHES):
        if sync:
            torch.cuda.synchronize()
        start = time.perf_counter()
        next(batches)
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)


def report(label: str, pipe) -> None:
    times = fetch_times_ms(pipe.train_loader, sync=True)
    raw = statistics.median(fetch_times_ms(pipe.train_loader.loader, sync=False))
    print(
        f"{label:28s} prefetcher p50 {statistics.median(times):6.2f} ms  p90 {times[int(0.9 * FETCHES)]:6.2f}  "
        f"max {times[-1]:6.1f}   DataLoader alone p50 {raw:6.2f} ms",
        flush=True,
    )


def bf16_steps(model, inputs: torch.Tensor, count: int) -> None:
    for _ in range(count):
        with torch.autocast("cuda", torch.bfloat16):
            model(inputs).float().sum().backward()
    torch.cuda.synchronize()


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_diag_loader.py needs CUDA: torch.cuda.is_available() is False here", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    recipe = load_recipe("cifar10-resnet18-cuda")
    splits = DATASETS.get("synthetic").build(recipe.data.dataset, 0)
    pipe = build_data_pipeline(recipe.data, splits, device=device, seed=0)
    print("threads", torch.get_num_threads(), "cpus", os.cpu_count(), "gc thresholds", gc.get_threshold())
    report("fresh process", pipe)
    model = build_model(recipe.model, num_classes=10, in_channels=3).to(device, memory_format=torch.channels_last)
    inputs = torch.randn(512, 3, 32, 32, device=device).to(memory_format=torch.channels_last)
    bf16_steps(model, inputs, 1)
    report("after an eager bf16 step", pipe)
    start = time.perf_counter()
    bf16_steps(torch.compile(model), inputs, 3)
    print(f"compile {time.perf_counter() - start:.1f} s")
    report("after compile", pipe)
    time.sleep(5)
    report("after compile + 5 s idle", pipe)
    start = time.perf_counter()
    gc.collect()
    print(f"gc objects {len(gc.get_objects())}, gc.collect {1e3 * (time.perf_counter() - start):.0f} ms")
    gc.freeze()
    report("after gc.freeze()", pipe)
    gc.disable()
    report("gc disabled", pipe)
    gc.enable()
    for threads in (4, 1):
        torch.set_num_threads(threads)
        report(f"torch threads {threads}", pipe)
    print(
        subprocess.run(
            ["ps", "-eo", "pid,pcpu,nlwp,comm", "--sort=-pcpu"], capture_output=True, text=True
        ).stdout.splitlines()[:8]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
