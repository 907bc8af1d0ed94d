"""What the bench asked of a script's trial, read from its variables (named in accel.engine.trial_variables) in one
place for both kinds of script: by its engine's agent (accel/trial/engine_agent.py) and by the instrument in a
script without one (accel/trial/instrument/recorder.py). Torch-free.

- `ACCEL_TRIAL=PATH`: where the record goes; without it the engine holds no agent among its core's observers.
- `ACCEL_TRIAL_WARMUP=W`, `ACCEL_TRIAL_STEPS=N`: the record is written after W untimed (compilation happens there)
  and N timed optimizer steps; N=0: when the script ends by itself (its own run: `tune --objective time`).
- `ACCEL_TRIAL_WINDOW=S`: and not before the timed steps hold S seconds (`accel bench --window`); a script that
  ends first after its N steps leaves a record saying the window was short.
- `ACCEL_TRIAL_TARGET=val_loss=1.5`: also the seconds from the process start until the script logs (`eng.log`)
  that value, its evaluations excluded as a recipe trial's are (the time from the step before the log to the log);
  with `ACCEL_TRIAL_STOP=1` the record is written and the process ends there; with `ACCEL_TRIAL_DEADLINE=S` too, it
  ends short of the target once it cannot reach it within S seconds (tune's pruner, accel.bench.pruner).
- `ACCEL_TRIAL_CURVE=val_loss`: every logged value of that metric is recorded (the curve a target is read from).
- `ACCEL_TRIAL_METRIC_PATTERNS=["val loss (?P<val_loss>[0-9.]+)"]`: a script without an engine reports metrics in
  the lines it prints; each pattern's named groups are metrics (accel/trial/instrument/reported.py).
- `ACCEL_TRIAL_SYNC=window`: synchronise the device after each warm-up step and the last step only, not after every
  step (`accel bench --sync window`): the timed steps' time is then one window, in which the host prepares the next
  step while the device works, as in a real run.
- `ACCEL_TRIAL_PROBE=1`: write what the engine was given (speed-ups, device, strategy, optimizer) as it is
  created, add the model's traits (convolutions, attention, repeated blocks) at `eng.setup` and exit there, before
  the first step: the bench asks this first, to know the script's speed-ups, the model, and that it uses an engine.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.trial_variables import (
    CURVE,
    DEADLINE,
    PATH,
    PATTERNS,
    PROBE,
    STEPS,
    STOP,
    SYNC,
    TARGET,
    WARMUP,
    WINDOW,
)

if TYPE_CHECKING:
    from ..bench.target import Target


@dataclass(frozen=True)
class Requested:
    """What the bench asked of a script's trial, from its variables (see the module docstring): read by the
    script's engine and by accel's instrument in a script without one (accel/trial/instrument)."""

    path: str
    warmup: int
    steps: int
    probe: bool
    every_step: bool
    target: Target | None
    metric: str | None  # the logged metric whose values are recorded (the target's)
    stop: bool  # end the trial when the target is reached
    patterns: tuple[str, ...] = ()  # regular expressions whose named groups are metrics in the script's printed lines
    window: float = 0.0  # seconds the timed steps hold at least, beside their count
    deadline: float | None = None  # with `stop`: seconds by which the target must be within reach (the pruner's)


def requested() -> Requested | None:
    """The trial this process is, or None outside the bench."""
    path = os.environ.get(PATH)
    if not path:
        return None
    target = None
    if os.environ.get(TARGET):
        from ..bench.target import parse_target

        target = parse_target(os.environ[TARGET], any_metric=True)
    return Requested(
        path,
        warmup=int(os.environ.get(WARMUP, "0")),
        steps=int(os.environ.get(STEPS, "1")),
        probe=os.environ.get(PROBE) == "1",
        every_step=os.environ.get(SYNC, "step") != "window",
        target=target,
        metric=target.metric if target else os.environ.get(CURVE) or None,
        stop=os.environ.get(STOP) == "1" and target is not None,
        patterns=tuple(json.loads(os.environ.get(PATTERNS) or "[]")),
        deadline=float(os.environ[DEADLINE]) if os.environ.get(DEADLINE) and target is not None else None,
        # several processes (torchrun's ranks) each keep a window: by time they could stop a step apart and leave
        # the others waiting in a collective, so there the count alone decides
        window=float(os.environ.get(WINDOW, "0")) if int(os.environ.get("WORLD_SIZE", "1")) == 1 else 0.0,
    )
