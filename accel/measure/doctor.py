"""`accel doctor`: what this machine offers for training, and the traps that quietly cost speed.

`collect()` gathers plain facts (versions, devices, CPU, BLAS and thread settings, optional backends); the
device facts come from `accel.devices`. `find_traps()` applies `accel.measure.traps`' rules, the speed lint's own, to
those facts (a recipe's train.lint_ignore applies here too), so each warning is tested on made-up machines.
Optional backends are probed with `accel.extras.installed` (a look-up) and package metadata, never imported: importing
DALI or torch_xla costs seconds and may grab a device.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from typing import Any

import torch

from .. import devices
from ..devices import available_cpus
from ..extras import installed
from .traps import machine_findings

# module -> distributions that may provide it (DALI's wheel name carries the CUDA major version).
BACKENDS = {
    "nvidia.dali": ("nvidia-dali-cuda130", "nvidia-dali-cuda120", "nvidia-dali-cuda110", "nvidia-dali"),
    "torch_xla": ("torch-xla", "torch_xla"),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "onnx": ("onnx",),
    "albumentations": ("albumentations",),
    "cv2": ("opencv-python-headless", "opencv-python", "opencv-contrib-python"),
    "tensorboard": ("tensorboard",),
}
THREAD_ENV = re.compile(r"^(OMP_|MKL_|KMP_|GOMP_|OPENBLAS_|TORCH_|PYTORCH_|CUDA_|NCCL_|CUBLAS_|TORCHINDUCTOR_)")


def _version(*dists: str) -> str | None:
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def backends() -> dict[str, dict[str, Any]]:
    """Each optional backend: whether it is importable here and its package version."""
    return {mod: {"installed": installed(mod), "version": _version(*dists)} for mod, dists in BACKENDS.items()}


def _nccl() -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # CPU builds have no NCCL; the call raises rather than returning None
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def _blas() -> dict[str, Any]:
    from threadpoolctl import threadpool_info

    found = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    pools = [
        {k: p.get(k) for k in ("user_api", "internal_api", "prefix", "version", "num_threads")}
        for p in threadpool_info()
    ]
    return {
        "torch_blas": found.group(1) if found else None,
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "threadpools": pools,
    }


def _gpus() -> list[dict[str, Any]]:
    # devices.environment() names the GPUs; their memory is only needed here. Asked only when CUDA is usable.
    if not devices.cuda_available():
        return []
    props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    return [{"name": p.name, "memory_mb": p.total_memory / 2**20, "capability": f"{p.major}.{p.minor}"} for p in props]


def _memory_mb() -> float | None:
    try:
        import psutil
    except ImportError:
        return None
    return psutil.virtual_memory().total / 2**20


def collect(recipe: Any = None) -> dict[str, Any]:
    """Facts about this machine (and, with a recipe, its loader and speed-up settings) plus `warnings`."""
    device = devices.resolve_device(recipe.device if recipe is not None else "auto")
    env = devices.environment(device)
    info = {
        "versions": {
            "python": env["python"],
            "torch": env["torch"],
            "torchvision": _version("torchvision"),
            "cuda": env["cuda"],
            "cudnn": env["cudnn"],
            "nccl": _nccl(),
        },
        "device": env.get("device"),
        "cuda_available": env["cuda_available"],
        "gpus": _gpus(),
        "mps_available": devices.mps_available(),
        "xla_requested": devices.xla_requested(),
        "cpu": {
            "model": env["cpu"],
            "class": env["cpu_class"],
            "cores": env["cpu_count"],
            "usable_cores": available_cpus(),
            "memory_mb": _memory_mb(),
        },
        "threads": {"torch": env["torch_threads"], "interop": env["torch_interop_threads"]},
        "blas": _blas(),
        "env": {k: v for k, v in sorted(os.environ.items()) if THREAD_ENV.match(k)},
        "backends": backends(),
        "flags": {
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        },
    }
    info["peaks"] = _peaks(device)
    if recipe is not None:
        info["recipe"] = _recipe_facts(recipe)
    info["warnings"] = find_traps(info)
    return info


def _peaks(device: torch.device) -> dict[str, str]:
    """The peak FLOP/s each compute dtype's MFU would be measured against on `device` (a CPU's are measured
    now, once, and cached)."""
    from . import peaks

    if device.type == "cuda":
        dtypes = ["fp32", "tf32", "bf16", "fp16", "fp8"]
    else:
        dtypes = ["fp32", "bf16"] if devices.supports_bf16(device) else ["fp32"]
    out = {}
    for dtype in dtypes:
        peak = peaks.run_peak(device, dtype)
        out[dtype] = f"{peak.flop_per_s / 1e12:.3g} TFLOP/s ({peak.source})" if peak else "unknown: no MFU reported"
    return out


def _recipe_facts(recipe: Any) -> dict[str, Any]:
    speedups = recipe.dump()["speedups"]
    flags = {
        key
        for opts in speedups.values()
        if (opts or {}).get("enabled", True)
        for key, value in (opts or {}).items()
        if key in ("benchmark", "deterministic") and value is True
    }
    loader = recipe.data.loader
    return {
        "name": recipe.name,
        "num_workers": loader.num_workers,
        "pin_memory": loader.pin_memory,
        "speedups": sorted(n for n, o in speedups.items() if (o or {}).get("enabled", True)),
        "benchmark": "benchmark" in flags,
        "deterministic": "deterministic" in flags,
        "lint_ignore": list(recipe.train.lint_ignore),
    }


def find_traps(info: dict[str, Any]) -> list[str]:
    """Plain-language warnings for known speed traps in `collect()`'s facts, less the codes the recipe's
    train.lint_ignore names; empty when none applies."""
    ignore = set((info.get("recipe") or {}).get("lint_ignore") or ())
    return [str(found) for found in machine_findings(trap_facts(info)) if found.code not in ignore]


def trap_facts(info: dict[str, Any]) -> dict[str, Any]:
    """`collect()`'s facts as the facts `accel.measure.traps` rules read."""
    recipe, flags = info.get("recipe") or {}, info["flags"]
    workers = recipe.get("num_workers")
    pools = (info.get("blas") or {}).get("threadpools") or []
    return {
        "device": str(info.get("device") or "cpu").split()[0].split(":")[0],
        "cores": info["cpu"]["usable_cores"],
        "torch_threads": info["threads"]["torch"],
        "blas_threads": max((pool.get("num_threads") or 0 for pool in pools), default=0),
        "workers": workers if isinstance(workers, int) else None,
        "pin_memory": recipe.get("pin_memory"),
        "omp_unset": "OMP_NUM_THREADS" not in info["env"],
        "cuda_available": info["cuda_available"],
        "cuda_build": info["versions"]["cuda"],
        "deterministic": bool(
            flags["cudnn_deterministic"] or flags["deterministic_algorithms"] or recipe.get("deterministic")
        ),
        "benchmark": bool(flags["cudnn_benchmark"] or recipe.get("benchmark")),
    }


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}"
    if value is None:
        return "-"
    return str(value)


def _rows(info: dict[str, Any]) -> list[tuple[str, str, str]]:
    rows = [("versions", k, _fmt(v)) for k, v in info["versions"].items()]
    rows += [
        ("device", "selected", _fmt(info["device"])),
        ("device", "cuda available", _fmt(info["cuda_available"])),
        ("device", "mps available", _fmt(info["mps_available"])),
        ("device", "xla requested", _fmt(info["xla_requested"])),
    ]
    rows += [("device", f"gpu {i}", f"{g['name']}, {_fmt(g.get('memory_mb'))} MB") for i, g in enumerate(info["gpus"])]
    rows += [("cpu", k, _fmt(v)) for k, v in info["cpu"].items()]
    rows += [("threads", k, _fmt(v)) for k, v in info["threads"].items()]
    blas = info["blas"]
    rows += [
        ("blas", "torch BLAS", _fmt(blas["torch_blas"])),
        ("blas", "mkl / mkldnn", f"{blas['mkl']} / {blas['mkldnn']}"),
    ]
    rows += [
        (
            "blas",
            p["prefix"] or p["internal_api"],
            " ".join(filter(None, [p["internal_api"], p["version"]])) + f", {p['num_threads']} threads",
        )
        for p in blas["threadpools"]
    ]
    rows += [("env", k, v) for k, v in info["env"].items()] or [("env", "(thread/CUDA variables)", "none set")]
    rows += [
        ("backends", k, f"{b['version'] or 'yes'}" if b["installed"] else "not installed")
        for k, b in info["backends"].items()
    ]
    rows += [("flags", k, _fmt(v)) for k, v in info["flags"].items()]
    rows += [("peak (MFU)", k, v) for k, v in info.get("peaks", {}).items()]
    rows += [("recipe", k, _fmt(v)) for k, v in (info.get("recipe") or {}).items()]
    return rows


def render(info: dict[str, Any], console: Any = None) -> None:
    """A table for people, then the warnings (or a line saying there are none)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    table = Table(title="accel doctor")
    for column in ("section", "item", "value"):
        table.add_column(column)
    for row in _rows(info):
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
    for warning in info["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)
    if not info["warnings"]:
        console.print("No known traps found.")
