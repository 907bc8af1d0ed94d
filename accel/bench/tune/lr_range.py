"""The learning-rate range test (Smith, 2017) that proposes tune's learning-rate candidate.

One trial of the configuration chosen so far, its learning rate growing geometrically from 1/30 to 30 times the
current one over the trial's steps (the `lr_range` schedule), its training loss read at every step. The loss,
smoothed, is lowest somewhere before it blows up; a tenth of the rate there is the proposal (the rate at the lowest
loss is already at the edge of stability, and a one-cycle or cosine schedule peaks at the rate it is given). The
proposal then runs beside the current rate like any candidate, judged by the objective: the range test only says
which value is worth a trial.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..knobs import LR_KEY, Knob, current
from ..trial_process import TrialSettings
from ..variants import Variant, format_value
from .objective import Objective
from .rows import TuneRow, skipped_row

if TYPE_CHECKING:
    from .search import Measure

SPAN = (1 / 30, 30.0)  # the factors of the current rate the test starts and ends at
SMOOTHING = 0.8  # exponential moving average of the loss: one step's loss is too noisy to find a minimum in
LAG = round(SMOOTHING / (1 - SMOOTHING))  # steps the average trails the loss by: the rate is read that much earlier
BLOWN_UP = 4.0  # the smoothed loss this many times its lowest so far: the rate is past stability, stop reading
CLOSE = 1.25  # a proposal within this factor of the current rate is not worth a trial


def propose(losses: list[float], rates: list[float]) -> tuple[float, float] | None:
    """(the rate at the lowest smoothed loss, a tenth of it) from each step's loss and rate; None when no step's
    loss is finite."""
    average, lowest, best = 0.0, math.inf, None
    for i, loss in enumerate(losses):
        if not math.isfinite(loss):
            break
        average = SMOOTHING * average + (1 - SMOOTHING) * loss
        value = average / (1 - SMOOTHING ** (i + 1))  # bias-corrected: the average starts at 0
        if value > BLOWN_UP * lowest:
            break
        if value < lowest:
            lowest, best = value, i
    if best is None:
        return None
    at = rates[max(best - LAG, 0)]
    return at, at / 10


def rates(lr: float, steps: int) -> list[float]:
    """The rate each step trains at under the `lr_range` schedule (accel/optimizers/builders.py) from `lr`."""
    start, end = SPAN
    growth = (end / start) ** (1 / max(steps - 1, 1))
    return [lr * start * growth**i for i in range(steps)]


def lr_range_knob(m: Measure, chosen: dict[str, Any], out: Path) -> tuple[Knob | None, list[TuneRow]]:
    """Run the range test on the configuration chosen so far: the learning-rate knob to measure (None when the
    test proposes about the current rate, failed, or would overrun the budget), and its row."""
    plain = m.subject.plain()
    lr = current(LR_KEY, chosen, plain)
    steps = m.settings.warmup + m.settings.steps

    def row(note: str) -> list[TuneRow]:
        return [skipped_row(LR_KEY, lr, f"{LR_KEY}=range test", note)]

    if not m.budget.allows(1 + 2 * m.trials):
        return None, row("not measured: over the --budget")
    schedule = {"name": "lr_range", "start_factor": SPAN[0], "end_factor": SPAN[1]}
    variant = Variant("lr-range-test", m.subject.effective({**chosen, "schedule": schedule}))
    files = m.subject.inputs([variant], out)
    settings = TrialSettings(steps=steps, warmup=0, timeout=m.settings.timeout, evaluate=False)
    once = replace(m, settings=settings, trials=1, objective=Objective())
    trials = once.run([(0, variant.name, files[variant.name])], out)
    m.budget.record(trials)
    losses = trials[0].step_losses if trials and trials[0].error is None else None
    found = propose(losses, rates(lr, len(losses))) if losses else None
    if found is None:
        return None, row(f"range test failed: see {out}")
    lowest, proposed = (float(f"{x:.3g}") for x in found)
    said = f"range test: loss lowest at lr {format_value(lowest)}, so {format_value(proposed)} proposed"
    if 1 / CLOSE <= proposed / lr <= CLOSE:
        return None, row(f"{said}: about the current rate, not measured")
    return Knob(LR_KEY, [proposed]), row(said)
