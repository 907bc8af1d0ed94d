"""The speed lint: settings that quietly cost speed, each found with its fix.

`facts()` reads a set-up trainer once at the start of a run; `findings()` is a pure function of those facts
(and, at the end, of the run's summary), so each finding is tested on made-up machines as well as on real
traps. The trainer logs the start findings once and puts all of them in summary.json; the bench puts them in
its report.
"""
from __future__ import annotations

import inspect
import logging
import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from . import devices
from .data.loaders import available_cpus
from .errors import AccelError
from .models.blocks import model_traits

if TYPE_CHECKING:
    from .trainer import Trainer

log = logging.getLogger("accel")
DATA_WAIT = 0.10  # above this share of step time waiting for batches, the loader is what to speed up
CODES = ("anomaly-detection", "deterministic", "channels-last-without-conv", "pin-memory-off", "optimizer-not-fused",
         "fp32-with-fast-bf16", "threads-over-cores", "processes-over-cores", "workers-compete", "data-wait",
         "recompiles", "torchscript")


@dataclass(frozen=True)
class Finding:
    """One speed trap: a stable `code`, what was found, and the change that removes it."""

    code: str
    found: str
    fix: str

    def __str__(self) -> str:
        return f"{self.found} Fix: {self.fix}"


class SpeedLint:
    """One run's lint: the facts read when fit() starts, each finding said once (on the first process), the
    codes in `ignore` never."""

    def __init__(self, ignore: list[str], say: bool = True):
        unknown = sorted(set(ignore) - set(CODES))
        if unknown:
            raise AccelError(f"train.lint_ignore: unknown speed-lint code(s) {', '.join(unknown)}; the codes are "
                             f"{', '.join(CODES)}.")
        self.ignore, self.say, self.facts = set(ignore), say, {}

    def start(self, trainer: Trainer) -> None:
        self.facts = facts(trainer)
        self._say(self._findings())

    def end(self, summary: dict[str, Any]) -> list[dict[str, str]]:
        """Every finding of the run as records; those only the run revealed (data wait, recompiles) said now."""
        if not self.facts:  # fit() failed before the lint read anything
            return []
        found = self._findings(summary)
        self._say(found[len(self._findings()):])  # the start findings come first and were said already
        return as_records(found)

    def _findings(self, summary: dict[str, Any] | None = None) -> list[Finding]:
        return [f for f in findings(self.facts, summary) if f.code not in self.ignore]

    def _say(self, found: list[Finding]) -> None:
        for finding in found if self.say else ():
            log.warning("speed lint: %s", finding)


def facts(trainer: Trainer) -> dict[str, Any]:
    """What the lint looks at, read from a trainer whose speed-ups are set up."""
    device, loader, optimizer = trainer.device, trainer.train_loader, trainer.optimizer
    loader = getattr(loader, "loader", loader)  # the device prefetcher wraps a DataLoader
    names = {s.name for s in trainer.speedups}
    return {
        "device": device.type, "cores": available_cpus(), "torch_threads": torch.get_num_threads(),
        # training processes on this machine: torchrun (`accel train --nproc N`) says how many it started
        "processes": int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
        "blas_threads": _blas_threads(), "workers": getattr(loader, "num_workers", None),
        "pin_memory": getattr(loader, "pin_memory", None),
        "in_memory": getattr(getattr(loader, "dataset", None), "in_memory", False),
        "anomaly_detection": torch.is_anomaly_enabled(),
        "deterministic": torch.are_deterministic_algorithms_enabled() or (
            device.type == "cuda" and torch.backends.cudnn.deterministic),
        "optimizer": type(optimizer).__name__, "fused": bool(optimizer.defaults.get("fused")),
        "fused_exists": "fused" in inspect.signature(type(optimizer).__init__).parameters,
        "channels_last": "channels_last" in names,
        "has_conv": model_traits(trainer.module)["has_conv"],
        "amp": "amp" in names, "fast_bf16": _fast_bf16(device), "jit": "jit" in names,
    }


def _blas_threads() -> int:
    """The largest thread pool of any BLAS or OpenMP library loaded in this process (0 when unknown)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return 0
    return max((pool.get("num_threads") or 0 for pool in threadpool_info()), default=0)


def _fast_bf16(device: torch.device) -> bool:
    """Whether bf16 matmuls run much faster than fp32 here: CUDA GPUs with bf16 tensor cores, CPUs with AMX.
    (AVX512-BF16 alone makes bf16 about as fast as fp32, so fp32 there is no trap.)"""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and "amx_bf16" in (devices.cpu_flags() or set())


def findings(facts: dict[str, Any], summary: dict[str, Any] | None = None) -> list[Finding]:
    """The traps `facts` show; with a run's `summary`, also those only the run itself reveals."""
    out = _process_traps(facts) + _device_traps(facts) + _thread_traps(facts)
    if summary is not None:
        out += _run_traps(facts, summary)
    return out


def _process_traps(f: dict[str, Any]) -> list[Finding]:
    out = []
    if f["anomaly_detection"]:
        out.append(Finding("anomaly-detection", "autograd anomaly detection is on: every op records its stack and "
                           "backward checks every result for NaN, several times slower.",
                           "torch.autograd.set_detect_anomaly(False) once the NaN is found."))
    if f["deterministic"]:
        out.append(Finding("deterministic", "deterministic algorithms are on: torch picks slower kernels (and "
                           "cudnn.benchmark cannot search).",
                           "torch.use_deterministic_algorithms(False) unless bit-exact reruns are the point."))
    if f.get("jit"):
        out.append(Finding("torchscript", "speed-up jit (TorchScript) is on: deprecated upstream since PyTorch "
                           "2.10, no new optimisations, and often slower than torch.compile.",
                           "`speedups: {compile: {}}` instead of `jit` (torch.export to ship the model)."))
    if f["channels_last"] and not f["has_conv"]:
        out.append(Finding("channels-last-without-conv", "speed-up channels_last is on, but the model has no "
                           "convolutions: the layout change only adds copies.", "remove `speedups.channels_last`."))
    return out


def _device_traps(f: dict[str, Any]) -> list[Finding]:
    out = []
    if f["device"] == "cuda" and f["pin_memory"] is False:
        out.append(Finding("pin-memory-off", "pin_memory is off with a CUDA device: each batch is copied twice "
                           "and the copy cannot overlap compute.", "data.loader.pin_memory: auto"))
    if f["device"] == "cuda" and f["fused_exists"] and not f["fused"]:
        out.append(Finding("optimizer-not-fused", f"{f['optimizer']} runs its unfused implementation on CUDA: "
                           "several kernels per parameter group instead of one.",
                           "speedups: {optim: {impl: fused}}"))
    if f["fast_bf16"] and not f["amp"]:
        where = "this GPU" if f["device"] == "cuda" else "this CPU (AMX)"
        out.append(Finding("fp32-with-fast-bf16", f"training in fp32 on {where}, whose bf16 matmuls are several "
                           "times faster.", "speedups: {amp: {dtype: bf16}} (check accuracy with `accel bench`)."))
    return out


def _thread_traps(f: dict[str, Any]) -> list[Finding]:
    out, cores = [], f["cores"]
    threads = max(f["torch_threads"], f["blas_threads"])
    if threads > cores:
        out.append(Finding("threads-over-cores", f"{threads} BLAS/OpenMP threads on {cores} usable cores: threads "
                           "wait for each other and every op runs at the slowest one's pace.",
                           f"OMP_NUM_THREADS={cores}, or `speedups: {{threads: {{}}}}` (caps at the cores)."))
    processes = f.get("processes", 1)
    if f["device"] == "cpu" and processes > cores:
        out.append(Finding("processes-over-cores", f"{processes} training processes on {cores} usable cores: each "
                           "CPU process needs a core of its own at least, so they take turns and every step waits "
                           "for the slowest.", f"--nproc {cores} or fewer (on a CPU, fewer processes with more "
                           "threads each are usually faster)."))
    workers = f["workers"] or 0
    if f["device"] == "cpu" and workers and workers + f["torch_threads"] > cores:
        out.append(Finding("workers-compete", f"{workers} loader worker(s) + {f['torch_threads']} compute threads "
                           f"on {cores} cores: the workers take cores from the training step.",
                           "data.loader.num_workers: 0 for in-memory data, else fewer compute threads "
                           "(speedups.threads.intra_op); `accel tune` measures both."))
    return out


def _run_traps(f: dict[str, Any], summary: dict[str, Any]) -> list[Finding]:
    out = []
    wait, workers = summary.get("data_wait_fraction"), f["workers"] or 0
    # In-memory tensors are gathered in one index per batch: workers would only add copies.
    if wait is not None and wait > DATA_WAIT and workers < f["cores"] and not f["in_memory"]:
        out.append(Finding("data-wait", f"{wait:.0%} of step time waited for batches with {workers} loader "
                           "worker(s).", "more data.loader.num_workers, data.cache for decoded images, or "
                           "augmentation on the device (`accel tune` measures workers)."))
    compiled = (summary.get("speedup_metrics") or {}).get("compile") or {}
    epochs = summary.get("epochs") or 0
    if epochs >= 2 and (compiled.get("recompiles") or 0) >= epochs:
        out.append(Finding("recompiles", f"torch.compile recompiled {compiled['recompiles']} times in {epochs} "
                           "epochs: a shape or value changes every epoch (often the last, smaller batch).",
                           "data.drop_last: true, or `speedups.compile.dynamic: true`."))
    return out


def as_records(found: list[Finding]) -> list[dict[str, str]]:
    return [asdict(f) for f in found]
