#!/usr/bin/env python
"""The device's real ceilings: dense matrix-multiply rate per dtype and device-memory bandwidth, measured.

MFU is only as honest as its denominator. A datasheet peak assumes boost clocks and ideal data; this measures
what one large `a @ b` reaches here (fp32 exact, fp32 through TF32, bf16, fp16, and float8 through
`torch._scaled_mm` on GPUs that have it), timed as the median of repeats after warm-up, on random inputs
(zeros run faster than real data), rotating among several input sets so no product reads the cache warm.
On CUDA, bandwidth is a large device-to-device copy, counting bytes read plus bytes written.

    python scripts/peak_rates.py                       # this machine's default device, JSON to runs/
    python scripts/peak_rates.py --device cuda --size 8192 --json runs/peaks.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from accel import devices  # noqa: E402

SETS = 3  # input sets rotated through, so repeated products do not find their operands in cache


def timed(fn: Callable[[int], object], device: torch.device, repeats: int, warmup: int = 3) -> float:
    """Median seconds of `fn(i)` over `repeats` calls after `warmup` calls."""
    for i in range(warmup):
        fn(i)
    times = []
    for i in range(repeats):
        devices.synchronize(device)
        start = time.perf_counter()
        fn(i)
        devices.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_rate(dtype_name: str, n: int, device: torch.device, repeats: int) -> float:
    """TFLOP/s of an n x n x n product in `dtype_name` (2 n^3 floating-point operations)."""
    tf32 = dtype_name == "tf32"
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}.get(
        dtype_name, torch.bfloat16)
    pairs = [(torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype))
             for _ in range(SETS)]
    if dtype_name == "fp8":
        return _fp8_rate(pairs, device, repeats)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        seconds = timed(lambda i: pairs[i % SETS][0] @ pairs[i % SETS][1], device, repeats)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return 2 * n**3 / seconds / 1e12


def _fp8_rate(pairs: list, device: torch.device, repeats: int) -> float:
    """float8 e4m3 operands, bf16 output, per-tensor scales: the tensor-core path of float8 training."""
    n = pairs[0][0].shape[0]
    one = torch.ones((), device=device)
    fp8 = [(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t().contiguous().t()) for a, b in pairs]
    seconds = timed(lambda i: torch._scaled_mm(*fp8[i % SETS], scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                    device, repeats)
    return 2 * n**3 / seconds / 1e12


def copy_bandwidth(device: torch.device, gigabytes: float, repeats: int) -> float:
    """GB/s of a device-to-device copy, bytes read plus bytes written."""
    count = int(gigabytes * 1e9 / 4)
    src, dst = torch.randn(count, device=device), torch.empty(count, device=device)
    seconds = timed(lambda i: dst.copy_(src), device, repeats)
    return 2 * count * 4 / seconds / 1e9


def measure(device: torch.device, n: int, repeats: int) -> dict:
    kinds = ["fp32", "bf16"]
    if device.type == "cuda":
        kinds = ["fp32", "tf32", "bf16", "fp16"] + (["fp8"] if torch.cuda.get_device_capability(device) >= (8, 9)
                                                     else [])
    rates, errors = {}, {}
    for kind in kinds:
        try:
            rates[kind] = float(f"{matmul_rate(kind, n, device, repeats):.4g}")
        except Exception as err:  # a dtype this build or device lacks is a row with its reason
            errors[kind] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    result = {"device": devices.device_name(device), "size": n, "repeats": repeats,
              "matmul_tflops": rates, "errors": errors}
    if device.type == "cuda":
        result["copy_gb_per_s"] = round(copy_bandwidth(device, 2.0, repeats), 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--size", type=int, default=None, help="matrix side (default: 8192 on CUDA, 2048 else)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path, default=Path("runs/peak_rates.json"))
    args = parser.parse_args(argv)
    device = devices.resolve_device(args.device)
    n = args.size or (8192 if device.type == "cuda" else 2048)
    result = measure(device, n, args.repeats) | {"env": devices.environment(device)}
    for kind, rate in result["matmul_tflops"].items():
        print(f"{kind:5} {rate:10.2f} TFLOP/s")
    for kind, error in result["errors"].items():
        print(f"{kind:5} {'-':>10}  {error}")
    if "copy_gb_per_s" in result:
        print(f"copy  {result['copy_gb_per_s']:10.1f} GB/s (read + write)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
