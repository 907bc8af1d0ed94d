#!/usr/bin/env python
"""Loader workers as processes or as threads on an image-folder recipe: samples/s and peak memory, side by side.

    python benchmarks/loader_workers.py imagefolder-jpeg --set data.dataset.root=data/jpeg-folder --rounds 4

Every pass is a fresh process (`--one KIND`) that builds the recipe's training loader with
`data.loader.workers_kind: KIND`, draws `--warmup` untimed batches, then times `--batches` batches; passes run
interleaved (processes, threads, processes, ...). Peak memory is the largest proportional set size (PSS: shared
pages split between the processes sharing them, so forked workers are not counted twice) of the pass's process
tree, sampled every 50 ms. The decoded cache is off (`data.cache.enabled=false`): the workers decode JPEGs, which
is what their kind changes. Prints a table and writes JSON (`--out`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import torch

KINDS = ("processes", "threads")


def tree_pss_mb(root: psutil.Process) -> float:
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # a worker that ended between listing and reading
            pass
    return total / 2**20


class PeakMemory:
    """The process tree's peak PSS, sampled by a thread until stopped."""

    def __init__(self, every_s: float = 0.05):
        self.peak, self.every_s, self.done = 0.0, every_s, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        me = psutil.Process()
        while not self.done.wait(self.every_s):
            self.peak = max(self.peak, tree_pss_mb(me))

    def stop(self) -> float:
        self.done.set()
        self.thread.join()
        return self.peak


def one_pass(args: argparse.Namespace) -> dict:
    """Build the loader with workers of kind `args.one` and time its batches in this process."""
    from accel.bench.data_pipelines import accel_loader
    from accel.config.recipe import load_recipe
    from accel.registry import DATASETS

    sets = [*args.overrides, "data.cache.enabled=false", f"data.loader.workers_kind={args.one}"]
    recipe = load_recipe(args.recipe, sets + ([f"data.loader.num_workers={args.workers}"] if args.workers else []))
    memory = PeakMemory()
    train = DATASETS.get("imagefolder").build(recipe.data.dataset, recipe.seed).train
    loader_cfg = recipe.data.loader.model_copy(update={"persistent_workers": False})
    loader = accel_loader(train, loader_cfg, recipe.data.batch_size, recipe.seed, torch.device("cpu"))
    batches, samples, start = iter(loader), 0, None
    for i in range(args.warmup + args.batches):
        if i == args.warmup:
            start = time.perf_counter()
        images, _ = next(batches)
        samples += len(images) if i >= args.warmup else 0
    seconds = time.perf_counter() - start
    workers = getattr(loader, "threads", loader.num_workers)
    return {"kind": args.one, "workers": workers, "samples_per_s": samples / seconds, "peak_mb": memory.stop()}


def _passes(args: argparse.Namespace) -> list[dict]:
    out = []
    for r in range(args.rounds):
        for kind in KINDS:
            argv = [sys.executable, __file__, args.recipe, "--one", kind, "--batches", str(args.batches)]
            argv += ["--warmup", str(args.warmup), "--workers", str(args.workers)]
            argv += [f"--set={item}" for item in args.overrides]
            done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=1800)
            out.append(json.loads(done.stdout.strip().splitlines()[-1]) | {"round": r})
            print(f"round {r} {kind}: {out[-1]['samples_per_s']:.0f} samples/s, {out[-1]['peak_mb']:.0f} MB")
    return out


def table(passes: list[dict]) -> str:
    lines = ["| workers | kind | samples/s (median, min-max) | peak PSS MB (median) |", "|---|---|---|---|"]
    for kind in KINDS:
        mine = [p for p in passes if p["kind"] == kind]
        rates = [p["samples_per_s"] for p in mine]
        lines.append(
            f"| {mine[0]['workers']} | {kind} | {statistics.median(rates):.0f} ({min(rates):.0f}-{max(rates):.0f}) "
            f"| {statistics.median(p['peak_mb'] for p in mine):.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", help="an image-folder recipe (a YAML file or a shipped name)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--workers", type=int, default=0, help="data.loader.num_workers (default: the recipe's)")
    parser.add_argument("--batches", type=int, default=30, help="timed batches per pass (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches first (default 3)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    parser.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)  # one pass in this process, as JSON
    parser.add_argument("--out", type=Path, help="write the passes and the table as JSON here")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_pass(args)))
        return
    passes = _passes(args)
    print(table(passes))
    if args.out:
        args.out.write_text(json.dumps({"argv": sys.argv, "passes": passes, "table": table(passes)}, indent=1))


if __name__ == "__main__":
    main()
