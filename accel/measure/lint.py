"""The speed lint: settings that quietly cost speed, each found with its fix.

`facts()` reads a set-up run (the engine's core) once at its start; `findings()` is a pure function of those facts
(and, at the end, of the run's summary), so each finding is tested on made-up machines as well as on real
traps. The trainer logs the start findings once and puts all of them in summary.json; the bench puts them in
its report.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections import Counter
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from .. import devices
from ..batches import tensors
from ..devices import available_cpus
from ..errors import AccelError
from ..models.blocks import model_traits
from . import host_syncs, peaks
from .traps import BF16_CODE, Finding, codes, findings

if TYPE_CHECKING:
    from ..engine.core import Core

log = logging.getLogger("accel")
SYNC_BATCH = 3  # the batch whose step is watched for host syncs: the first ones sync for one-off reasons


class SpeedLint:
    """One run's lint: the facts read when fit() starts, each finding said once (on the first process), the
    codes in `ignore` never."""

    def __init__(self, ignore: list[str], say: bool = True):
        unknown = sorted(set(ignore) - set(codes()))
        if unknown:
            raise AccelError(
                f"train.lint_ignore: unknown speed-lint code(s) {', '.join(unknown)}; the codes are "
                f"{', '.join(codes())}."
            )
        self.ignore, self.say, self.facts, self.batches = set(ignore), say, {}, 0

    def start(self, run: Core) -> None:
        self.facts, self.batches = facts(run, probe_bf16=BF16_CODE not in self.ignore), 0
        self._say(self._findings())

    def watch(self, batch: Any) -> AbstractContextManager:
        """Around a batch's step (`batch` on the device): the first batch's float64 tensors; on CUDA, the host
        syncs of batch SYNC_BATCH's step, each named by its line (a run with fewer batches is not watched)."""
        self.batches += 1
        if self.batches == 1:
            self.facts["float64_batch"] = float64_batch(batch)
        if self.batches == SYNC_BATCH and self.facts.get("device") == "cuda":
            self.facts["syncs"] = Counter()
            return host_syncs.on_cuda(self.facts["syncs"])
        return nullcontext()

    def end(self, summary: dict[str, Any]) -> list[dict[str, str]]:
        """Every finding of the run as records; those only the run revealed (data wait, recompiles) said now."""
        if not self.facts:  # fit() failed before the lint read anything
            return []
        found = self._findings(summary)
        self._say(found[len(self._findings()) :])  # the start findings come first and were said already
        return as_records(found)

    def _findings(self, summary: dict[str, Any] | None = None) -> list[Finding]:
        return [f for f in findings(self.facts, summary) if f.code not in self.ignore]

    def _say(self, found: list[Finding]) -> None:
        for finding in found if self.say else ():
            log.warning("speed lint: %s", finding)


def facts(run: Core, probe_bf16: bool = True) -> dict[str, Any]:
    """What the lint looks at, read from a run's core whose speed-ups are set up (a recipe's or a loop's own);
    `probe_bf16`: measure bf16's matmul speed where the fp32 finding could apply (half a second, once per machine and
    shape: the figure is cached)."""
    device, loader = run.device, run.train_loader
    loader = getattr(loader, "loader", loader)  # the device prefetcher wraps a DataLoader
    traits = model_traits(run.module)
    amp = run.strategy.precision.name != "fp32"
    return {
        **_training_facts(device, run.optimizer, run.module),
        "workers": getattr(loader, "threads", getattr(loader, "num_workers", None)),  # thread workers too
        "pin_memory": getattr(loader, "pin_memory", None),
        "in_memory": getattr(getattr(loader, "dataset", None), "in_memory", False),
        # speed-ups on a model without the trait they need (channels_last without convolutions)
        "needless": {s.name: s.needs for s in run.speedups if s.needs and not traits[s.needs]},
        "amp": amp,
        "speedup_findings": [s.lint_finding for s in run.speedups if s.lint_finding is not None],
        "bf16_matmul_speedup": _bf16_speedup(device, run.module, amp) if probe_bf16 else None,
    }


def script_facts(
    device: torch.device,
    optimizer: torch.optim.Optimizer,
    module: torch.nn.Module | None,
    precision: str | None,
    loader: dict[str, Any] | None,
    float64_inputs: list[str],
    framework: str = "plain",
) -> dict[str, Any]:
    """The same facts of a script without accel in it, as accel's instrument saw its training (`loader`: the
    DataLoader's `workers`, `pin_memory` and `in_memory`, where it used one; `float64_inputs`: its first training
    forward's); its findings say their fixes in the script's own terms (`script`: its framework, "hf", "lightning" or
    "plain")."""
    return {
        **_training_facts(device, optimizer, module),
        **{"workers": None, "pin_memory": None, "in_memory": False, **(loader or {})},
        "float64_batch": float64_inputs,
        "needless": {},
        "amp": precision not in (None, "fp32"),
        "script": framework,
        "bf16_matmul_speedup": _bf16_speedup(device, module, precision not in (None, "fp32")),
    }


def _training_facts(
    device: torch.device, optimizer: torch.optim.Optimizer, module: torch.nn.Module | None
) -> dict[str, Any]:
    """The facts a training's process, device, optimizer and model give, however it was set up."""
    return {
        "device": device.type,
        "cores": available_cpus(),
        "torch_threads": torch.get_num_threads(),
        # training processes on this machine: torchrun (`accel train --nproc N`) says how many it started
        "processes": int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
        # no BLAS pools (threadpoolctl's introspection, `accel doctor`'s): read in a loop's first step, it cost the
        # GPT example's next steps 0.2 s; torch's own pool is `torch_threads`
        "anomaly_detection": torch.is_anomaly_enabled(),
        "deterministic": torch.are_deterministic_algorithms_enabled()
        or (device.type == "cuda" and torch.backends.cudnn.deterministic),
        "optimizer": type(optimizer).__name__,
        "fused": bool(optimizer.defaults.get("fused")),
        "fused_exists": "fused" in inspect.signature(type(optimizer).__init__).parameters,
        "fast_bf16": _fast_bf16(device),
        "float64_model": float64_names(module) if module is not None else [],
    }


def float64_names(module: torch.nn.Module) -> list[str]:
    """The names of the module's float64 parameters and buffers."""
    named = [*module.named_parameters(), *module.named_buffers()]
    return [name for name, t in named if t.dtype == torch.float64]


def float64_batch(batch: Any) -> list[str]:
    """The shapes of the batch's float64 tensors."""
    return [str(tuple(t.shape)) for t in tensors(batch) if t.dtype == torch.float64]


def _fast_bf16(device: torch.device) -> bool:
    """Whether bf16 matmuls run much faster than fp32 here: CUDA GPUs with bf16 tensor cores, CPUs with AMX.
    (AVX512-BF16 alone makes bf16 about as fast as fp32, so fp32 there is no trap.)"""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and "amx_bf16" in (devices.cpu_flags() or set())


def _bf16_speedup(device: torch.device, module: torch.nn.Module | None, amp: bool) -> float | None:
    """bf16 over fp32 at the model's largest matmul, with the probe `accel profile` uses, where the fp32 finding
    could apply: the figure it states, and below BF16_PAYS no finding."""
    if amp or module is None or not _fast_bf16(device):
        return None
    return peaks.bf16_speedup_at_model_size(module, device)


def as_records(found: list[Finding]) -> list[dict[str, str]]:
    return [asdict(f) for f in found]
