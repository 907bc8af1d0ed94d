"""The profiled window of a run: `warmup` optimizer steps unprofiled (compilation, the allocator, oneDNN/cuDNN
kernel choice), then `steps` recorded by torch.profiler with the loop's phases timed (accel/measure/anatomy.py) and, on
CUDA, the allocator's history; the report is written when the run ends. `accel profile` and `accel train
--profile` both add this callback to the trainer; a hand-written loop's engine and an unchanged script's recorder
drive it through `start`, `stepped` and `end`. It reads the run from the engine's core (ProfiledRun)."""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from .. import devices
from ..callbacks import Callback
from ..measure import load, memory_snapshot, peaks
from ..measure.anatomy import Segment
from ..runs.records import FitSummary
from ..speedups.compile_workers import stop_compile_workers

log = logging.getLogger("accel")
SNAPSHOT = "memory.pickle"
KINETO_LOG_LEVEL, QUIET = "KINETO_LOG_LEVEL", "5"  # kineto's levels: 4 is ERROR, 5 only what it addresses to users


class ProfiledRun(Protocol):
    """What the window reads of a run: the engine's core (accel.engine.core.Core), a recipe's and a hand-written
    loop's alike; an unchanged script's recorder adapted (accel.trial.instrument.profiled.UnchangedRun)."""

    device: torch.device
    steps: int  # optimizer steps taken
    anatomy: Any  # accel.measure.anatomy.Anatomy: the phases' clock
    model: Any  # what forward calls
    module: Any  # the plain module
    optimizer: Any
    strategy: Any  # its precision's name is read
    speedups: Any
    train_loader: Any
    task: str | None  # the recipe's task, None for a loop of the user's own


@dataclass
class Profiled:
    """What a finished window holds for the report."""

    profiler: profile
    steps: int
    device: torch.device
    segments: list[Segment] = field(default_factory=list)  # the phases' time, flat (accel.measure.anatomy)
    boundaries: list[float] = field(default_factory=list)  # perf_counter at each profiled step's start and end
    snapshot: Path | None = None  # CUDA memory snapshot
    facts: dict[str, Any] = field(default_factory=dict)  # what the advice needs to know of the run's settings
    load: dict[str, Any] | None = None  # the machine's load over the window (accel/measure/load.py)
    planned: int = 0  # the profiled steps asked for: `steps` is fewer when the run ended first
    status: str = "completed"  # how the run ended (summary.json's status): interrupted and diverged are said
    diverged_at: int | None = None

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


class ProfileWindow(Callback):
    """Profiles optimizer steps `warmup` to `warmup + steps` (counted from where the fit starts) and, at the fit's
    end, hands them to `finished(profiled)` (its result: `.report`); with `sync_debug` (CUDA), warns with a stack
    of every host-device sync in the window."""

    def __init__(self, warmup: int, steps: int, folder: Path, finished, sync_debug: bool = False):
        self.warmup, self.steps, self.folder, self.finished = warmup, steps, folder, finished
        self.sync_debug = sync_debug
        self.profiled: Profiled | None = None
        self.report: Any = None
        self._first = 0
        self._closed = False
        self._load_start: load.Counters | None = None

    @property
    def closed(self) -> bool:
        """The profiled steps are done (the report comes at the fit's end)."""
        return self._closed

    def on_fit_start(self, trainer) -> None:
        self.start(trainer.engine)

    def on_batch_end(self, trainer, info) -> None:
        if info.optimizer_stepped:
            self.stepped(trainer.engine)

    def on_fit_end(self, trainer, summary: FitSummary) -> None:
        self.end(trainer.engine, summary.status, summary.diverged_at_step)

    def start(self, run: ProfiledRun) -> None:
        """The run's steps begin (its speed-ups set up): warm-up counts from here."""
        cuda = run.device.type == "cuda"
        if not cuda:  # kineto logs "gpuGetDeviceCount failed with code 35" where CUDA is installed but no GPU is
            os.environ.setdefault(KINETO_LOG_LEVEL, QUIET)  # read when the profiler starts; a user's setting wins
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        plan = schedule(wait=max(self.warmup - 1, 0), warmup=min(self.warmup, 1), active=self.steps, repeat=1)
        self.profiled = Profiled(profile(activities=activities, schedule=plan), self.steps, run.device)
        self.profiled.planned = self.steps
        self._first, self._closed = run.steps, False
        self.profiled.profiler.start()
        if self.warmup == 0:
            self._open(run)

    def stepped(self, run: ProfiledRun) -> None:
        """An optimizer step of the run ended."""
        if self.profiled is None or self._closed:
            return
        devices.synchronize(run.device)  # a step's GPU work belongs to that step
        done = run.steps - self._first
        if done == self.warmup:
            stop_compile_workers()  # a compile-worker pool still starting would be profiled as the run's
            self._open(run)
        elif done == self.warmup + self.steps:
            self._close(run)
        elif done > self.warmup:
            self.profiled.boundaries.append(time.perf_counter())
        # the profiler's own cost (a few ms a step) is a phase of its own, not the run's logging; this ends the
        # step's range in the trace and, at the window's edges, starts or stops recording
        with run.anatomy.phase("profiler"):
            self.profiled.profiler.step()
        if self._closed:
            self.profiled.profiler.stop()

    def end(self, run: ProfiledRun, status: str, diverged_at: int | None = None) -> None:
        """Report the window of a run that ended with `status` (a trainer's fit, or a script's loop)."""
        profiled, self.profiled = self.profiled, None
        if profiled is None:
            return
        if not self._closed:  # the run ended before the window did: report the steps it has
            if run.anatomy.active:
                self._close(run, profiled)
            profiled.profiler.stop()
            profiled.steps = max(len(profiled.boundaries) - 1, 0)
        if profiled.steps < 1:
            log.warning("profile: the run ended before its profiled steps; nothing written to %s", self.folder)
            return
        profiled.facts = _facts(run)
        profiled.status, profiled.diverged_at = status, diverged_at
        self.report = self.finished(profiled)

    def _open(self, run: ProfiledRun) -> None:
        self._load_start = load.counters()
        self.profiled.boundaries.append(run.anatomy.start(run.model, run.module))
        if self.profiled.cuda:
            memory_snapshot.record_history(True)
            if self.sync_debug:
                torch.cuda.set_sync_debug_mode("warn")

    def _close(self, run: ProfiledRun, profiled: Profiled | None = None) -> None:
        profiled = profiled or self.profiled
        profiled.boundaries.append(run.anatomy.stop())
        profiled.segments, self._closed = run.anatomy.segments, True
        profiled.load = load.between(self._load_start, load.counters())
        if profiled.cuda:
            if self.sync_debug:
                torch.cuda.set_sync_debug_mode("default")
            profiled.snapshot = memory_snapshot.dump(self.folder / SNAPSHOT)
            memory_snapshot.record_history(False)


def _facts(run: ProfiledRun) -> dict[str, Any]:
    """The run's settings the advice weighs: whether amp is on, the task, the loader's workers, and whether the
    script has no engine to take accel's settings."""
    loader = run.train_loader
    precision = run.strategy.precision.name
    return {
        "precision": precision,
        "speedups": sorted(s.name for s in run.speedups),
        "task": run.task or "own loop",
        "num_workers": getattr(loader, "num_workers", None),
        "bf16_fast": devices.supports_bf16(run.device),
        "device_memory_mb": devices.total_memory_mb(run.device),
        # a script without an accel.Engine (accel/trial/instrument): hf, lightning or plain; None with an engine
        "framework": getattr(run, "framework", None),
        "fused_optimizer": bool((getattr(run.optimizer, "defaults", None) or {}).get("fused")),
        "switches": _own_switches(run),
        "bf16_matmul_speedup": _bf16_at_model_size(run) if precision == "fp32" else None,
    }


def _own_switches(run: ProfiledRun) -> dict[str, str]:
    """A plain script's own speed switches that run here, by meaning, as its command line spells them on (timm's
    `--amp --amp-dtype bfloat16`): the advice names them."""
    if getattr(run, "framework", None) != "plain":  # an unchanged script's run: it holds the parsers it recorded
        return {}
    from ..bench.script_flags import plain_switches

    found, _ = plain_switches({"resolved_device": str(run.device), "parsers": run.parsers}, sys.argv)
    return {switch.meaning: switch.spelled() for switch in found if switch.cannot is None}


def _bf16_at_model_size(run: ProfiledRun) -> float | None:
    """bf16 over fp32 at the model's largest matmul (a Linear's, a convolution's as its im2col product), measured
    after the window: what the mixed-precision advice weighs, since a narrow model's bf16 can be slower."""
    if not devices.supports_bf16(run.device):
        return None
    return peaks.bf16_speedup_at_model_size(run.module, run.device)
