#!/usr/bin/env python
"""The device's real ceilings: dense matrix-multiply rate per dtype and device-memory bandwidth, measured.

MFU is only as honest as its denominator. A datasheet peak assumes boost clocks and ideal data; this measures
what one large `a @ b` reaches here (fp32 exact, fp32 through TF32, bf16, fp16, and float8 through
`torch._scaled_mm` on GPUs that have it), on random inputs (zeros run faster than real data), timed as MFU's
own CPU probe times it (`accel.measure.peaks.best_seconds`: the fastest of the repeats after a warm-up call).
On CUDA, bandwidth is a large device-to-device copy, counting bytes read plus bytes written.

    python scripts/peak_rates.py                       # this machine's default device, JSON to runs/
    python scripts/peak_rates.py --device cuda --size 8192 --json runs/peaks.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from accel import devices  # noqa: E402
from accel.measure.peaks import best_seconds  # noqa: E402


def timed(fn, device: torch.device, repeats: int) -> float:
    return best_seconds(fn, device, seconds=0, repeats=repeats)  # --repeats, not a time budget, sets the length


def matmul_rate(dtype_name: str, n: int, device: torch.device, repeats: int) -> float:
    """TFLOP/s of an n x n x n product in `dtype_name` (2 n^3 floating-point operations)."""
    tf32 = dtype_name == "tf32"
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}.get(
        dtype_name, torch.bfloat16
    )
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    if dtype_name == "fp8":
        return _fp8_rate(a, b, device, repeats)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        seconds = timed(lambda: a @ b, device, repeats)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return 2 * n**3 / seconds / 1e12


def _fp8_rate(a: torch.Tensor, b: torch.Tensor, device: torch.device, repeats: int) -> float:
    """float8 e4m3 operands, bf16 output, per-tensor scales: the tensor-core path of float8 training."""
    n = a.shape[0]
    one = torch.ones((), device=device)
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t().contiguous().t()
    seconds = timed(
        lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), device, repeats
    )
    return 2 * n**3 / seconds / 1e12


def copy_bandwidth(device: torch.device, gigabytes: float, repeats: int) -> float:
    """GB/s of a device-to-device copy, bytes read plus bytes written."""
    count = int(gigabytes * 1e9 / 4)
    src, dst = torch.randn(count, device=device), torch.empty(count, device=device)
    seconds = timed(lambda: dst.copy_(src), device, repeats)
    return 2 * count * 4 / seconds / 1e9


def measure(device: torch.device, n: int, repeats: int) -> dict:
    kinds = ["fp32", "bf16"]
    if device.type == "cuda":
        kinds = ["fp32", "tf32", "bf16", "fp16"] + (
            ["fp8"] if torch.cuda.get_device_capability(device) >= (8, 9) else []
        )
    rates, errors = {}, {}
    for kind in kinds:
        try:
            rates[kind] = float(f"{matmul_rate(kind, n, device, repeats):.4g}")
        except Exception as err:  # a dtype this build or device lacks is a row with its reason
            errors[kind] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    result = {
        "device": devices.device_name(device),
        "size": n,
        "repeats": repeats,
        "matmul_tflops": rates,
        "errors": errors,
    }
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
