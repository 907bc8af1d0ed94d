#!/usr/bin/env python
"""How long the training loop stalls when accel stops inductor's compile-worker pool, torch's way and accel's.

On a GPU host the pool starts with the first compilation; `speedups.compile.release_workers` stops it once the
graphs are made. torch's `shutdown_compile_workers` waits for the pool's sidecar process to exit, which it does
only after finishing its own start; `accel.speedups.compile_workers.release_compile_workers` forgets the pool at
once and stops it on a thread. Each line is one fresh process that starts a pool of 2 workers, waits AGE seconds (a pool
just started, as after graphs from a warm cache, or an older one) and times the call.

    python benchmarks/compile_workers_release.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ONE = """
import sys, time
from torch._inductor import async_compile, config
from accel.speedups.compile_workers import release_compile_workers
config.compile_threads = 2
async_compile.AsyncCompile.warm_pool()
time.sleep(float(sys.argv[2]))
stop = {"torch": async_compile.shutdown_compile_workers, "accel": release_compile_workers}[sys.argv[1]]
start = time.perf_counter()
stop()
print(time.perf_counter() - start)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ages", type=float, nargs="+", default=[0.0, 10.0])
    args = parser.parse_args()
    for age in args.ages:
        for way in ("torch", "accel"):
            seconds = [_one(way, age) for _ in range(args.rounds)]
            said = ", ".join(f"{s:.3f}" for s in seconds)
            print(f"pool aged {age:4.1f} s, {way:5s}: median {statistics.median(seconds):.3f} s ({said})")


def _one(way: str, age: float) -> float:
    command = [sys.executable, "-c", ONE, way, str(age)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


if __name__ == "__main__":
    main()
