"""What a hand-written loop keeps and writes through the engine: `save`/`load` (with the engine's own state),
`log` (metrics.jsonl and TensorBoard under `out`), the FLOPs of its first forward, `summary` and `close`
(summary.json, typed as accel.runs.records.LoopSummary)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .. import devices
from ..batches import leading_size, leading_tensor
from ..callbacks.tensorboard import TensorBoard
from ..io import check_creatable, write_atomic
from ..runs.records import LoopRecord, LoopSummary
from . import state as engine_state

if TYPE_CHECKING:
    from .core import Engine


class _Counting:
    """What FLOP counting (accel.measure.flops.Utilisation) reads of a run, for a loop's own model: the forward of the
    first step's inputs, a sum of its first output standing in for the loop's loss (a loss adds few FLOPs)."""

    def __init__(self, engine: Engine):
        self.device, self.module, self.strategy, self.speedups = (
            engine.device,
            engine.module,
            engine.strategy,
            engine.speedups,
        )
        self.step_contexts, self.task = engine.step_contexts, self

    def samples(self, batch: Any) -> int:
        return leading_size(batch)

    def loss(self, model: Any, batch: Any) -> torch.Tensor:
        args, kwargs = batch
        return leading_tensor(model(*args, **kwargs)).float().sum()


class LoopRecords:
    """Mixed into accel.engine.core.Engine; see the module docstring."""

    def save(self: Engine, path: str | Path, state: dict[str, Any]) -> None:
        """Write `state` (modules, optimizers, schedulers, loaders, plain values) and the engine's own state
        atomically (rank 0; every rank waits)."""
        engine_state.save(self, path, state)

    def load(self: Engine, path: str | Path, state: dict[str, Any]) -> dict[str, Any]:
        """Load what `save` wrote into the objects in `state`, in place; plain values are put back in `state`."""
        return engine_state.load(self, path, state)

    def log(self: Engine, metrics: dict[str, Any]) -> None:
        """Record scalars (a `val_loss`, anything): with an `out`, in its metrics.jsonl and TensorBoard (tb/)."""
        record = {"step": self.steps, **{k: _scalar(v) for k, v in metrics.items()}}
        self.logged.append(record)
        if self._trial is not None:  # `accel bench --target`: the time until the script reports its value
            self._trial.logged(record)
        if self.out is None or not self.world.is_main:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        written = LoopRecord.from_flat(record)
        with open(self.out / "metrics.jsonl", "a") as handle:
            handle.write(written.to_json() + "\n")
        if self._loop.tensorboard is None:
            self._loop.tensorboard = TensorBoard(self.out / "tb")
            self._loop.tensorboard.on_fit_start(self)
        self._loop.tensorboard.on_log(self, written)

    def meter_batch(self: Engine, batch: Any, data_s: float) -> None:
        """A training batch the engine's loader fetched, after waiting `data_s` for it."""
        self._loop.data_s += data_s

    def _count_flops(self: Engine) -> None:
        """FLOPs per sample of the first training forward's inputs, counted when a figure first needs them (the
        summary, a bench trial's record), not in the loop's first step, whose time is the loop's own."""
        loop = self._loop
        if loop.flops_inputs is not None:
            inputs, loop.flops_inputs = loop.flops_inputs, None
            loop.utilisation.count(_Counting(self), inputs)

    def summary(self: Engine) -> dict[str, Any]:
        """What the run did: steps, throughput after the first step, data wait, speed-ups, the last metrics."""
        return self._loop_summary().model_dump(exclude_unset=True)

    def _loop_summary(self: Engine) -> LoopSummary:
        loop, now = self._loop, time.perf_counter()
        timed = now - loop.first_step if loop.first_step is not None else None
        self._count_flops()

        def rate(count: int) -> float | None:
            return count / timed if timed and count else None

        metrics: dict[str, Any] = {}
        for record in self.logged:
            metrics.update(record)
        samples_per_s = rate(loop.samples - loop.samples_at_first)
        summary = LoopSummary(
            steps=self.steps,
            samples=loop.samples,
            tokens=loop.tokens or None,
            wall_s=now - loop.started,
            samples_per_s=samples_per_s,
            flops_per_sample=loop.utilisation.flops_per_sample,
            **loop.utilisation.stats(samples_per_s),
            tokens_per_s=rate(loop.tokens - loop.tokens_at_first),
            data_wait_fraction=loop.data_s / (now - loop.started) if now > loop.started else None,
            device=devices.device_name(self.device),
            precision=self.strategy.precision.name,
            strategy=self.strategy.name,
            speedups=[s.name for s in self.speedups],
            skipped_speedups=self.skipped_speedups,
            speedup_metrics={s.name: m for s in self.speedups if (m := s.metrics())},
            metrics=metrics,
        )
        summary.lint = loop.lint.end(summary.model_dump()) if loop.lint is not None else []
        return summary

    def close(self: Engine) -> dict[str, Any]:
        """Tear the speed-ups down (every global flag restored); with `out`, write summary.json there."""
        summary = self._loop_summary()
        self.teardown()
        if self._loop.tensorboard is not None:
            self._loop.tensorboard.on_fit_end(self, None)  # it closes its file; the summary is the own loop's
        if self.out is not None and self.world.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            write_atomic(self.out / "summary.json", summary.to_json(indent=2))
        return summary.model_dump(exclude_unset=True)

    def __enter__(self: Engine) -> Engine:
        return self

    def __exit__(self: Engine, *exc: Any) -> None:
        self.close()


def records_folder(out: str | Path | None) -> Path | None:
    """The engine's `out`, refused now if no folder can be made there (a file, under a file, not writable): the
    first `log` would otherwise fail with a raw traceback once training has begun."""
    if out is None:
        return None
    check_creatable(out, "accel.Engine(out=)")
    return Path(out)


def _scalar(value: Any) -> Any:
    return value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
