"""The peak FLOP/s that MFU divides by: a table of dense GPU peaks, or a CPU's matmul rate measured once.

GPU figures are the datasheets' **dense** tensor-core peaks (the sparse "with sparsity" figures are twice as
high, and MFU against them reads 2x too low). A GPU not in the table has no peak, so no MFU. A CPU's peak is
measured by a matrix-multiply probe at the run's compute dtype and thread count, and cached per CPU model and
torch version, so MFU on a CPU is a fraction of what this machine's matmul reaches, not of a datasheet.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .. import devices
from ..io import write_atomic

TERA = 1e12
# dense TFLOP/s by dtype: NVIDIA datasheets (H100 SXM5/PCIe, H200 SXM, A100 SXM/PCIe, L4)
GPU_PEAKS: dict[str, dict[str, float]] = {
    "H100 PCIe": {"fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756, "fp8": 1513},
    "H100 NVL": {"fp32": 60, "tf32": 417, "bf16": 835, "fp16": 835, "fp8": 1671},
    "H100": {"fp32": 67, "tf32": 495, "bf16": 989, "fp16": 989, "fp8": 1979},  # SXM5 (HBM3)
    "H200": {"fp32": 67, "tf32": 495, "bf16": 989, "fp16": 989, "fp8": 1979},
    "A100": {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
    "L4": {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5},
}
# (M, K, N) of the probe's matmuls, 2.1 GFLOP each: square, and the tall-skinny shapes of a transformer's layers
# (a token batch times a weight), which a CPU's BLAS may run faster than a square one (1.5x on a 2-core AVX2 EPYC)
PROBE_SHAPES = ((1024, 1024, 1024), (4096, 256, 1024), (4096, 1024, 256), (16384, 256, 256))
CPU = torch.device("cpu")
PROBE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Peak:
    flop_per_s: float
    dtype: str
    source: str  # "datasheet (dense): NVIDIA H100 ..." or "measured: matmul probe ..."


def gpu_peak(name: str, dtype: str) -> Peak | None:
    """The dense peak of the GPU called `name` (torch.cuda.get_device_name) at `dtype`, or None if unknown."""
    for key, peaks in GPU_PEAKS.items():  # the more specific names come first
        if key in name and dtype in peaks:
            return Peak(peaks[dtype] * TERA, dtype, f"datasheet, dense: {name}")
    return None


def cpu_peak(dtype: str, cache: Path | None = None, at_least: float = 0.0) -> Peak:
    """This CPU's matmul FLOP/s at `dtype` with the current thread count: measured once, then read from the cache.

    A cached figure below `at_least` (a rate a run has just reached) was measured while something else slowed the
    machine (a probe beside a busy neighbour read 45 GFLOP/s where 68 was real): it is measured again, and the
    cache keeps the higher figure, so one unlucky probe cannot make every later MFU read over 100%.
    """
    cache = cache or cache_path()
    key = f"{devices.cpu_model()}|torch {torch.__version__}|{torch.get_num_threads()} threads|{dtype}"
    cached = _read(cache)
    old = cached.get(key, {}).get("flop_per_s", 0.0)
    if key not in cached or old < at_least:
        cached[key] = asdict(
            Peak(
                max(old, measure_matmul(PROBE_DTYPES[dtype])),
                dtype,
                f"measured: best of {len(PROBE_SHAPES)} matmul shapes, {key}",
            )
        )
        _write(cache, cached)
    return Peak(**cached[key])


def measure_matmul(dtype: torch.dtype, seconds: float = 0.25) -> float:
    """The best FLOP/s over the probe shapes, each repeated for about `seconds`."""
    return max(_matmul_rate(m, k, n, dtype, seconds) for m, k, n in PROBE_SHAPES)


def _matmul_rate(m: int, k: int, n: int, dtype: torch.dtype, seconds: float) -> float:
    own = torch.Generator().manual_seed(0)  # the run's random stream (its batches' order) is left untouched
    a, b = torch.randn(m, k, generator=own).to(dtype), torch.randn(k, n, generator=own).to(dtype)
    return 2 * m * k * n / best_seconds(lambda: a @ b, seconds=seconds)


def bf16_matmul_speedup(
    k: int, n: int, device: torch.device, rows: int = 1024, seconds: float = 0.05, rounds: int = 5
) -> float:
    """bf16 matmul's speed over fp32's at a model's own size (`rows` x k times k x n) on `device`: where its layers
    are narrow, bf16's conversions cost more than its arithmetic saves, whatever the device's peak. The median of
    `rounds` interleaved pairs, each the best of about `seconds`: a neighbour's burst moves one pair, not the
    figure."""
    own = torch.Generator().manual_seed(0)  # the run's random stream is left untouched
    a, b = torch.randn(rows, k, generator=own).to(device), torch.randn(k, n, generator=own).to(device)
    a16, b16 = a.bfloat16(), b.bfloat16()
    ratios = [
        best_seconds(lambda: a @ b, device, seconds) / best_seconds(lambda: a16 @ b16, device, seconds)
        for _ in range(rounds)
    ]
    return sorted(ratios)[rounds // 2]


def best_seconds(
    fn: Callable[[], object], device: torch.device = CPU, seconds: float = 0.25, repeats: int = 1
) -> float:
    """The fastest of `fn()`'s calls over about `seconds` and at least `repeats` calls, after one warm-up call
    (thread pool, BLAS dispatch, kernel choice). The fastest, not the median: a peak is what the hardware
    reaches when nothing else gets in the way."""
    fn()
    best, done, deadline = float("inf"), 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline or done < repeats:
        devices.synchronize(device)
        start = time.perf_counter()
        fn()
        devices.synchronize(device)
        best, done = min(best, time.perf_counter() - start), done + 1
    return best


def run_peak(device: torch.device, compute_dtype: str) -> Peak | None:
    """The peak a run on `device` computing in `compute_dtype` is measured against; None where none is known."""
    if device.type == "cuda":
        return gpu_peak(torch.cuda.get_device_name(device), compute_dtype)
    if device.type == "cpu" and compute_dtype in PROBE_DTYPES:
        return cpu_peak(compute_dtype)
    return None


def cache_path() -> Path:
    if os.environ.get("ACCEL_PEAKS_CACHE"):
        return Path(os.environ["ACCEL_PEAKS_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "accel" / "peaks.json"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write(path: Path, data: dict) -> None:
    try:  # a read-only home costs a re-measurement next time, not the run
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data, indent=1))
    except OSError:
        pass
