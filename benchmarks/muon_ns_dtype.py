#!/usr/bin/env python
"""Time of Muon's Newton-Schulz orthogonalisation of one matrix in each `optim.ns_dtype` (accel/optimizers/muon_ns.py),
at the shapes of lm-bytes' GPT matrices (192 x 768, both ways round) and the GPT example's (64 x 192). On a CPU
without native bf16 the bf16 run is emulated, which is why `auto` picks float32 there; with native bf16 the faster
dtype depends on the shape, which is why `auto` measures each there. Median of --repeats calls after one
warm-up; prints a table and writes JSON.

    python benchmarks/muon_ns_dtype.py --threads 1 --json benchmarks/results/muon-ns-dtype.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from accel import devices  # noqa: E402
from accel.optimizers.muon_ns import DTYPES, NS_COEFFICIENTS, orthogonalise  # noqa: E402

# lm-bytes' GPT matrices both ways round, and the GPT example's (width 64): bf16 wins at the first, fp32 at the
# second on an AMX Xeon, which is why `auto` measures each shape on such a CPU
SHAPES = ((192, 768), (768, 192), (64, 192), (192, 64))


def seconds(update: torch.Tensor, dtype: torch.dtype, repeats: int) -> float:
    orthogonalise(update, dtype, NS_COEFFICIENTS, 5, 1e-7)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        orthogonalise(update, dtype, NS_COEFFICIENTS, 5, 1e-7)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's); 1 on a busy shared machine")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    for shape in SHAPES:
        update = torch.randn(shape)
        for name, dtype in DTYPES.items():
            rows.append({"shape": list(shape), "ns_dtype": name, "median_s": seconds(update, dtype, args.repeats)})
    print(f"cpu native bf16: {devices.cpu_has_native_bf16()}, torch threads: {torch.get_num_threads()}")
    print("| shape | ns_dtype | median ms |\n| --- | --- | --- |")
    for row in rows:
        print(f"| {row['shape'][0]} x {row['shape'][1]} | {row['ns_dtype']} | {row['median_s'] * 1e3:.1f} |")
    if args.json:
        env = {"cpu_native_bf16": devices.cpu_has_native_bf16(), "torch_threads": torch.get_num_threads()}
        args.json.write_text(json.dumps({"env": env, "repeats": args.repeats, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
