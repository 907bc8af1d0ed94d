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
from ..errors import AccelError
from ..io import check_creatable, write_atomic
from ..measure.flops import ForwardSum
from ..runs.records import LoopRecord, LoopSummary
from ..runs.rundir import METRICS, RECIPE, SUMMARY, TENSORBOARD, cut_metrics
from . import trial_variables
from .core import Core
from .loop_state import LoopState


class LoopRecords:
    """The records of one engine's loop: its core's counts and the loop's state, written under `out` (None: a
    trial's process, or no folder given); with `resume`, continuing the records there."""

    def __init__(self, core: Core, loop: LoopState, out: Path | None, resume: bool = False):
        self.core, self.loop, self.out = core, loop, out
        self._continues = resume  # until the first write, which cuts the earlier run's records back

    def log(self, metrics: dict[str, Any]) -> None:
        record = {"step": self.core.steps, **{k: _scalar(v) for k, v in metrics.items()}}
        self.loop.logged.append(record)
        self.core.tell("logged", record)  # `accel bench --target`: the time until the script reports its value
        if self.out is None or not self.core.world.is_main:
            return
        written = LoopRecord.from_flat(record)
        with open(self._folder() / METRICS, "a") as handle:
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
            write_atomic(self._folder() / SUMMARY, summary.to_json(indent=2))
        return summary

    def _folder(self) -> Path:
        """`out`, made at the first write. A resumed run's metrics.jsonl keeps the earlier run's records up to the
        step it continues from (`eng.load`'s checkpoint; none loaded: it starts over), as `accel train --resume`
        keeps its own: the records never read 5, 10, 5."""
        self.out.mkdir(parents=True, exist_ok=True)
        if self._continues:
            self._continues = False
            if (self.out / METRICS).is_file():
                cut_metrics(self.out / METRICS, self.loop.resumed_at)
        return self.out


def records_folder(out: str | Path | None, resume: bool) -> Path | None:
    """The engine's `out`, refused now if no folder can be made there (a file, under a file, not writable): the
    first `log` would otherwise fail with a raw traceback once training has begun. Refused too where it holds a
    run's records already, unless `resume` continues a loop's own: two runs would mix their metrics.jsonl, and
    the later summary.json would replace the earlier (an `accel train` run's "completed" gone)."""
    if out is None:
        if resume:
            raise AccelError("accel.Engine(resume=True) continues the records in `out`: give the folder, out=DIR")
        return None
    out = Path(out)
    check_creatable(out, "accel.Engine(out=)")
    if not trial_variables.asked():  # a trial's engine writes nothing there
        _check_records(out, resume)
    return out


def _check_records(out: Path, resume: bool) -> None:
    if (out / RECIPE).exists():
        raise AccelError(
            f"accel.Engine(out=) {out} holds an `accel train` run ({RECIPE}): a loop's engine neither writes into "
            "nor continues one. Choose another out."
        )
    held = [name for name in (METRICS, SUMMARY, TENSORBOARD) if (out / name).exists()]
    if held and not resume:
        raise AccelError(
            f"accel.Engine(out=) {out} holds an earlier run's records ({', '.join(held)}); accel never overwrites "
            "or mixes two runs' records. To continue that run, pass resume=True (its metrics.jsonl is kept up to "
            "the step `eng.load` continues from); to start a new one, choose another out."
        )


def _scalar(value: Any) -> Any:
    return value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
