"""The peak FLOP/s that MFU divides by: a table of dense GPU peaks, or a CPU's from its hardware or a probe.

GPU figures are the datasheets' **dense** tensor-core peaks (the sparse "with sparsity" figures are twice as
high, and MFU against them reads 2x too low). A GPU not in the table has no peak, so no MFU. A CPU's peak comes
from its hardware where /proc/cpuinfo tells it (the cores used x the clock x the FLOPs its vector units finish a
cycle: the widest vector its flags name, FMA, two units; AMX tiles for bf16), else from a matrix-multiply probe at
the run's compute dtype and thread count, measured once and cached per CPU model and torch version. Either is
raised to a rate a run reached above it (a virtual machine's clock reads below its turbo; a probe beside a busy
neighbour reads low), and the cache keeps that rate, so a CPU's MFU is never above 1 and nothing is measured
again inside a run. Each `Peak` says where it came from.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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
# a wider matmul is compute-bound in either dtype, so the ratio holds, and the speed lint probes at a run's start
# beside a model that may fill the device: its tensors stay under 130 MB (a vocabulary's head would take gigabytes)
PROBE_DIM_AT_MOST = 4096
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


def flop_per_cycle(dtype: str, flags: set[str], halves_512: bool = False) -> tuple[int, str] | None:
    """The FLOPs a core's vector units can finish a cycle at `dtype`, an upper bound from its instruction sets, and
    which; None where the flags name none known. bf16 or fp16 without instructions of its own runs at fp32's.
    `halves_512`: the core runs a 512-bit instruction as two 256-bit halves (AMD Zen 4), at half the rate."""
    if dtype in ("bf16", "fp16") and f"amx_{dtype}" in flags:
        return 1024, f"AMX-{dtype.upper()} tiles"
    per_cycle, units = (1, "2 units of 256 bits") if halves_512 else (2, "2 units")  # 512-bit instructions a cycle
    if dtype in ("bf16", "fp16") and f"avx512_{dtype}" in flags:
        return 32 * 2 * per_cycle, f"AVX512-{dtype.upper()}: 32 lanes, FMA, {units}"
    if "avx512f" in flags:
        return 16 * 2 * per_cycle, f"AVX-512: 16 fp32 lanes, FMA, {units}"
    return (8 * 2 * 2, "AVX2: 8 fp32 lanes, FMA, 2 units") if {"avx2", "fma"} <= flags else None


def hardware_peak(dtype: str, threads: int) -> Peak | None:
    """This CPU's peak at `dtype` on `threads` cores from its hardware (cores x clock x FLOPs a cycle), or None
    where its flags or clock cannot be read."""
    per_cycle = flop_per_cycle(dtype, devices.cpu_flags() or set(), devices.cpu_halves_512())
    clock = devices.cpu_clock_ghz()
    if per_cycle is None or clock is None:
        return None
    (flop, isa), (ghz, where), cores = per_cycle, clock, min(threads, devices.available_cpus())
    source = f"hardware: {cores} cores x {ghz:.2f} GHz ({where}) x {flop} FLOP/cycle ({isa})"
    return Peak(cores * ghz * 1e9 * flop, dtype, source)


def cpu_peak(dtype: str, cache: Path | None = None) -> Peak:
    """This CPU's peak at `dtype` with the current thread count: from its hardware, else a matmul probe measured
    once and cached; raised to the highest rate a run reached here above it (`reached`)."""
    cache = cache or cache_path()
    key = _key(dtype)
    peak = hardware_peak(dtype, torch.get_num_threads())
    if peak is None:
        said = f"measured: best of {len(PROBE_SHAPES)} matmul shapes, {key}"
        peak = Peak(**measured_once(cache, key, lambda: asdict(Peak(measure_matmul(PROBE_DTYPES[dtype]), dtype, said))))
    return _raised(peak, _read(cache).get(f"{key}|reached", 0.0))


def measured_once(cache: Path, key: str, measure: Callable[[], Any]) -> Any:
    """`key`'s figure in the cache, measured by `measure()` and kept there the first time it is asked for."""
    cached = _read(cache)
    if key not in cached:
        cached[key] = measure()
        _write(cache, cached)
    return cached[key]


def reached(peak: Peak, flop_per_s: float, cache: Path | None = None) -> Peak:
    """A CPU's `peak` raised to `flop_per_s`, a rate a run reached above it, which the cache keeps for later runs:
    nothing is measured (a probe inside a run's steps would slow them)."""
    cache = cache or cache_path()
    key, cached = f"{_key(peak.dtype)}|reached", _read(cache)
    if flop_per_s > cached.get(key, 0.0):
        cached[key] = flop_per_s
        _write(cache, cached)
    return _raised(peak, flop_per_s)


def _raised(peak: Peak, flop_per_s: float) -> Peak:
    if flop_per_s <= peak.flop_per_s:
        return peak
    said = f"{peak.source}; raised to {flop_per_s / 1e9:.0f} GFLOP/s, a rate a run reached here"
    return Peak(flop_per_s, peak.dtype, said)


def _key(dtype: str) -> str:
    return f"{devices.cpu_model()}|torch {torch.__version__}|{torch.get_num_threads()} threads|{dtype}"


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


def bf16_speedup_at_model_size(module: torch.nn.Module, device: torch.device) -> float | None:
    """`bf16_matmul_speedup` at the model's largest matmul (a Linear's, a convolution's as its im2col product), the
    figure the profile's mixed-precision advice and the speed lint's fp32 finding state; None without such a layer.
    Measured once per device, thread count, torch version and shape, and cached: the lint asks at every run's start,
    where the probe's 0.6 s (a 2-core AMX Xeon) would be paid by every run (docs/benchmarks.md)."""
    layers = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    shapes = [(m.weight[0].numel(), m.weight.shape[0]) for m in module.modules() if isinstance(m, layers)]
    if not shapes:
        return None
    k, n = (min(side, PROBE_DIM_AT_MOST) for side in max(shapes, key=lambda shape: shape[0] * shape[1]))
    key = f"{devices.device_name(device)}|torch {torch.__version__}|bf16 over fp32 at {k}x{n}"
    return measured_once(cache_path(), key, lambda: bf16_matmul_speedup(k, n, device))


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
