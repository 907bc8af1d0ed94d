"""What a hand-written loop writes through its engine: `log` (metrics.jsonl and TensorBoard under `out`), the FLOPs
of its first forward, `summary` and `close` (summary.json, typed as accel.runs.records.LoopSummary). Its checkpoints
(`save`/`load`) are accel.engine.state's."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from .. import devices
from ..callbacks.tensorboard import TensorBoard
from ..io import check_creatable, write_atomic
from ..measure.flops import ForwardSum
from ..runs.records import LoopRecord, LoopSummary
from ..runs.rundir import METRICS, SUMMARY, TENSORBOARD
from .core import Core
from .loop_state import LoopState


class LoopRecords:
    """The records of one engine's loop: its core's counts and the loop's state, written under `out` (None: a
    trial's process, or no folder given)."""

    def __init__(self, core: Core, loop: LoopState, out: Path | None):
        self.core, self.loop, self.out = core, loop, out

    def log(self, metrics: dict[str, Any]) -> None:
        record = {"step": self.core.steps, **{k: _scalar(v) for k, v in metrics.items()}}
        self.loop.logged.append(record)
        self.core.tell("logged", record)  # `accel bench --target`: the time until the script reports its value
        if self.out is None or not self.core.world.is_main:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        written = LoopRecord.from_flat(record)
        with open(self.out / METRICS, "a") as handle:
            handle.write(written.to_json() + "\n")
        if self.loop.tensorboard is None:
            self.loop.tensorboard = TensorBoard(self.out / TENSORBOARD)
            self.loop.tensorboard.on_fit_start(self.core)
        self.loop.tensorboard.on_log(self.core, written)

    def count_flops(self) -> None:
        """FLOPs per sample of the first training forward's inputs, counted when a figure first needs them (the
        summary, a bench trial's record), not in the loop's first step, whose time is the loop's own."""
        loop = self.loop
        if loop.flops_inputs is not None:
            inputs, loop.flops_inputs = loop.flops_inputs, None
            loop.utilisation.count(self.core, ForwardSum, inputs)

    def summary(self) -> LoopSummary:
        """What the run did: steps, throughput after the first step, data wait, speed-ups, the last metrics."""
        core, loop, count, now = self.core, self.loop, self.core.count, time.perf_counter()
        timed = now - loop.first_step if loop.first_step is not None else None
        self.count_flops()

        def rate(counted: int) -> float | None:
            return counted / timed if timed and counted else None

        metrics: dict[str, Any] = {}
        for record in loop.logged:
            metrics.update(record)
        samples_per_s = rate(count.samples - loop.samples_at_first)
        summary = LoopSummary(
            steps=core.steps,
            samples=count.samples,
            tokens=count.tokens or None,
            wall_s=now - loop.started,
            samples_per_s=samples_per_s,
            flops_per_sample=loop.utilisation.flops_per_sample,
            **loop.utilisation.stats(samples_per_s),
            tokens_per_s=rate(count.tokens - loop.tokens_at_first),
            data_wait_fraction=count.data_s / (now - loop.started) if now > loop.started else None,
            device=devices.device_name(core.device),
            precision=core.strategy.precision.name,
            strategy=core.strategy.name,
            speedups=[s.name for s in core.speedups],
            skipped_speedups=core.skipped_speedups,
            speedup_metrics=core.part_metrics(),
            metrics=metrics,
        )
        summary.lint = loop.lint.end(summary.model_dump()) if loop.lint is not None else []
        return summary

    def close(self) -> LoopSummary:
        """Tear the speed-ups down (every global flag restored); with `out`, write summary.json there."""
        summary = self.summary()
        self.core.teardown()
        if self.loop.tensorboard is not None:
            self.loop.tensorboard.on_fit_end(self.core, None)  # it closes its file; the summary is the own loop's
        if self.out is not None and self.core.world.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            write_atomic(self.out / SUMMARY, summary.to_json(indent=2))
        return summary


def records_folder(out: str | Path | None) -> Path | None:
    """The engine's `out`, refused now if no folder can be made there (a file, under a file, not writable): the
    first `log` would otherwise fail with a raw traceback once training has begun."""
    if out is None:
        return None
    check_creatable(out, "accel.Engine(out=)")
    return Path(out)


def _scalar(value: Any) -> Any:
    return value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
