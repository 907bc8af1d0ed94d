"""What `accel.Engine` knows of the hand-written loop around it, beside what its core counts (steps, samples,
tokens, data wait: accel.engine.core.StepCount)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..callbacks.tensorboard import TensorBoard
from ..measure.flops import Utilisation
from ..measure.lint import SpeedLint


@dataclass
class LoopState:
    """What the engine knows of the loop around it (the core counts its steps, samples and tokens)."""

    set_up: bool = False
    step_function: bool = False  # the loop gave its step as one function (compile_step)
    autocast_depth: int | None = None  # torch's autocast nesting inside eng.autocast(), None outside it
    in_no_sync: bool = False
    forward_synced: bool | None = None  # whether the last training forward ran outside no_sync
    said: set[str] = field(default_factory=set)  # notes logged once
    utilisation: Utilisation = field(default_factory=Utilisation)  # FLOPs of a sample, counted when first asked
    flops_inputs: Any = None  # a few samples of the first training forward's inputs, until their FLOPs are counted
    lint: SpeedLint | None = None
    tensorboard: TensorBoard | None = None  # with `out`, from the first `log`
    unsynced: Any = None  # the strategy's no_sync, open from a non-final micro-batch's forward to its backward
    in_step: bool = False  # inside a compile_step step
    forward_contexts: bool = False  # a forward outside eng.autocast() enters the step contexts (set by setup)
    low_precision: bool = False  # the precision is not fp32 (set by setup)
    distributed: bool = False  # several processes (set by setup)
    optimizer_step: Any = None  # what the loop's `optimizer.step()` runs (the strategy's choice, at setup)
    backward: Any = None  # what `eng.backward(loss)` runs (the strategy's choice, at setup)
    syncs: bool = False  # the strategy reduces gradients in backward: a micro-batch that does not step skips it
    started: float = field(default_factory=time.perf_counter)
    first_step: float | None = None  # when the first optimizer step ended: throughput is counted from there
    samples_at_first: int = 0
    tokens_at_first: int = 0
    batch_sum: Any = None  # the first training batch's checksum, under several processes (accel.engine.ranks)
    logged: list[dict[str, Any]] = field(default_factory=list)  # what the loop reported through `log`
    resumed_at: int = 0  # the optimizer steps of the checkpoint `eng.load` continued from
