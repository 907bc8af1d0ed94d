"""How long a sharded checkpoint holds training up: torch.distributed.checkpoint's `save` against `async_save`
(what accel's sharded checkpoints use), one process, a state of `--mb` MB of float32, written to `--dir`.

Rounds alternate the two (A B A B); the first round is discarded as warm-up. `async_save` blocks while it
copies the state into memory of its own, then writes in a background thread: it pays where storage is slower
than that copy (network file systems), not where a write lands in the page cache.

    python benchmarks/dcp_async_save.py --dir /tmp --mb 100 --rounds 5 --json dcp_async_save.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings

import torch
from torch.distributed.checkpoint import async_save, save


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where the checkpoints are written (default: the temp folder)")
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # one process, on purpose
    state = {f"w{i}": torch.randn(256, 1024) for i in range(args.mb)}  # 1 MB each
    times: dict[str, list[float]] = {"save": [], "async_save, blocking": [], "async_save, until written": []}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(dir=args.dir) as folder:
            start = time.perf_counter()
            save(state, checkpoint_id=f"{folder}/sync", no_dist=True)
            times["save"].append(time.perf_counter() - start)
            start = time.perf_counter()
            future = async_save(state, checkpoint_id=f"{folder}/async", no_dist=True)
            times["async_save, blocking"].append(time.perf_counter() - start)
            future.result()
            times["async_save, until written"].append(time.perf_counter() - start)
    result = {name: [round(t * 1000, 1) for t in values[1:]] for name, values in times.items()}
    print(f"{'':28s} {'median ms':>10s} {'min':>8s} {'max':>8s}   ({args.mb} MB, {args.rounds - 1} rounds)")
    for name, values in result.items():
        print(f"{name:28s} {statistics.median(values):10.1f} {min(values):8.1f} {max(values):8.1f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"mb": args.mb, "dir": args.dir, "torch": torch.__version__, "ms": result}, handle, indent=2)


if __name__ == "__main__":
    main()
