"""The one place that knows about hardware: picking a device, synchronising it, reading its memory.

Everything else asks this module, so tests patch hardware facts here and nowhere else.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
from pathlib import Path
from typing import Any

import torch

from .batches import map_tensors
from .errors import AccelError
from .extras import require


def available_cpus() -> int:
    """CPU cores this process may run on (respects taskset/cgroup affinity, unlike os.cpu_count)."""
    return len(usable_cpu_ids())


def usable_cpu_ids() -> list[int]:
    """The ids of the CPU cores this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return list(range(os.cpu_count() or 1))


def cuda_available() -> bool:
    return torch.cuda.is_available()


def cuda_count() -> int:
    """CUDA GPUs this process sees (0 without CUDA)."""
    return torch.cuda.device_count() if cuda_available() else 0


def mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()


def xla_requested() -> bool:
    """torch_xla is importable and PJRT_DEVICE says which XLA device to use."""
    return bool(os.environ.get("PJRT_DEVICE")) and importlib.util.find_spec("torch_xla") is not None


def resolve_device(spec: str = "auto") -> torch.device:
    """`auto` picks cuda > xla > mps > cpu; an explicit device that is missing is an error."""
    kind = spec.split(":")[0]
    if spec == "auto":
        if cuda_available():
            return torch.device("cuda")
        if xla_requested():
            return _xla_device()
        return torch.device("mps") if mps_available() else torch.device("cpu")
    if kind == "cuda" and not cuda_available():
        raise AccelError(
            f"device `{spec}` was asked for, but CUDA is not available here "
            f"(torch {torch.__version__}, CUDA build {torch.version.cuda}). Use `device: auto` or `cpu`."
        )
    if kind == "mps" and not mps_available():
        raise AccelError("device `mps` was asked for, but Apple's MPS backend is not available here.")
    if kind == "xla":
        require("device `xla`", "torch_xla")  # docs/devices.md: torch_xla must match torch exactly
        return _xla_device()
    return torch.device(spec)


def _xla_device() -> torch.device:
    import torch_xla

    return torch_xla.device()


def synchronize(device: torch.device) -> None:
    """Wait for queued work so a timer reads the real duration."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    elif device.type == "xla":
        import torch_xla

        torch_xla.sync(wait=True)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> float:
    """Peak allocator memory on CUDA; elsewhere the process's peak resident set size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def total_memory_mb(device: torch.device) -> float:
    """The device's memory on CUDA; elsewhere the machine's."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / 2**20
    import psutil

    return psutil.virtual_memory().total / 2**20


def supports_bf16(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return cpu_has_native_bf16()
    return device.type == "xla"


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether the CPU computes in bf16 natively (AVX512-BF16 or AMX-BF16). Without it torch emulates bf16
    matmuls, 13x slower than fp32 on a 2-core AVX2 EPYC (docs/benchmarks.md). True where the flags cannot be
    read (not Linux): unknown is not refused; and with ACCEL_CPU_BF16=1, to use bf16 anyway (the tests do, to
    check its numbers on any machine)."""
    if os.environ.get("ACCEL_CPU_BF16") == "1":
        return True
    flags = cpu_flags()
    return flags is None or bool({"avx512_bf16", "amx_bf16"} & flags)


# (class, the flag that marks it), fastest first: the instruction sets that set a CPU's training speed
CPU_CLASSES = (("AMX", "amx_bf16"), ("AVX512-BF16", "avx512_bf16"), ("AVX-512", "avx512f"), ("AVX2", "avx2"))


def cpu_class() -> str:
    """The CPU's class by its fastest matrix instructions (`AMX`, `AVX512-BF16`, `AVX-512`, `AVX2`), else its
    architecture: the same loop's costs differ between classes (docs/benchmarks.md), so each figure names it."""
    flags = cpu_flags() or set()
    return next((name for name, flag in CPU_CLASSES if flag in flags), platform.machine())


def cpu_flags() -> set[str] | None:
    flags = _cpuinfo("flags")
    return None if flags is None else set(flags.split())


def cpu_halves_512() -> bool:
    """Whether this CPU runs 512-bit vector instructions as two 256-bit halves: AMD's family 25 (Zen 4; Zen 3, the
    same family, has no AVX-512). Zen 5 and Intel's cores have 512-bit units."""
    return _cpuinfo("vendor_id") == "AuthenticAMD" and _cpuinfo("cpu family") == "25"


def _cpuinfo(field: str) -> str | None:
    """The first value of `field` in /proc/cpuinfo (Linux), or None."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def supports_fp16_scaler(device: torch.device) -> bool:
    """fp16 training needs a GradScaler, which accel supports on CUDA."""
    return device.type == "cuda"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        return f"cpu ({cpu_model()}, {torch.get_num_threads()} threads)"
    return str(device)


def cpu_clock_ghz() -> tuple[float, str] | None:
    """The cores' highest clock and where it was read: cpufreq's maximum (turbo included) where the kernel gives
    it, else the clock /proc/cpuinfo reads now (a virtual machine's nominal one, which its turbo may pass); None
    where neither is known."""
    try:
        khz = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text())
        return khz / 1e6, "cpufreq maximum"
    except (OSError, ValueError):
        pass
    mhz = _cpuinfo("cpu MHz")
    try:
        return (float(mhz) / 1000, "/proc/cpuinfo") if mhz else None
    except ValueError:
        return None


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


ENV_VARS = (
    "ACCEL_CPU_BF16",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "PJRT_DEVICE",
    "TORCHINDUCTOR_CACHE_DIR",
    "CUBLAS_WORKSPACE_CONFIG",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
)


def environment(device: torch.device | None = None) -> dict[str, Any]:
    """Versions, device and thread facts that make a run's numbers interpretable (env.json)."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_available": cuda_available(),
        "cpu": cpu_model(),
        "cpu_class": cpu_class(),
        "cpu_native_bf16": cpu_has_native_bf16(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "env": {name: os.environ[name] for name in ENV_VARS if name in os.environ},
    }
    if device is not None:
        info["device"] = device_name(device)
    if cuda_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Move the tensors of a batch of any nesting to the device."""
    return map_tensors(lambda tensor: tensor.to(device, non_blocking=non_blocking), batch)


def inference_mode(device: torch.device):
    """inference_mode where the backend supports it; XLA tensors need plain no_grad."""
    return torch.no_grad() if device.type == "xla" else torch.inference_mode()


def to_cpu(state: Any) -> Any:
    """A (nested) state dict with every tensor on the CPU: checkpoints must not hold XLA or CUDA tensors."""
    return to_device(state, torch.device("cpu"))
