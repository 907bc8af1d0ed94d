"""tune's pruner: a candidate timed to a target stops short of it once it cannot be read as sooner than the reference
measured beside it, in its round (accel.bench.tune.search sets each trial's deadline; runner.run_trials passes it).
Asked by every kind of trial as it runs (a recipe's TargetClock, a script's instrument or engine agent), so it
imports nothing heavy: a script's instrument loads it before the script's first line."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol


class Target(Protocol):
    """What the pruner asks of a target (accel.bench.target.Target: imported by it, so not imported here)."""

    value: float
    minimise: bool

    def reached(self, value: float) -> bool: ...


PRUNE_SLACK = 1.2  # a candidate this many times the reference's time to the target, in its round, is not sooner
PACE_EVALS = 3  # the readings a pace is read over: the last and the two before it


@dataclass(frozen=True)
class Pruned:
    """Why a trial stopped short of its target, when (its clock) and its deadline."""

    why: str
    at_s: float
    deadline_s: float

    def record(self) -> dict[str, Any]:
        """The trial record's fields: why, and the seconds to its deadline it did not run (what its candidate
        would have cost at the least to be judged: one short of the target by its deadline is not sooner)."""
        return {"pruned": self.why, "pruned_saved_s": max(self.deadline_s - self.at_s, 0.0)}


@dataclass(frozen=True)
class Deadline:
    """A trial's deadline on its clock, and its warm-up steps, within which it is never stopped (a stopped trial
    still has timed steps to report). Asked at each optimizer step and each evaluation, with the steps done."""

    seconds: float
    warmup: int

    def at_step(self, target: Target, now_s: float, steps: int) -> Pruned | None:
        return overdue(target, now_s, self.seconds) if steps > self.warmup else None

    def at_eval(self, target: Target, evals: list[dict[str, Any]], steps: int) -> Pruned | None:
        return pruned(target, evals, self.seconds) if steps > self.warmup else None


def overdue(target: Target, now_s: float, deadline_s: float | None) -> Pruned | None:
    """A trial that has not reached `target` stops at `now_s` (its clock: seconds since its process started, less
    its evaluations) past its `deadline_s`, the reference's time to the target in its round times PRUNE_SLACK
    (tune's pruner, accel.bench.tune.search): it can no longer be read as sooner. Cheap: asked at every step."""
    if deadline_s is None or now_s <= deadline_s:
        return None
    why = f"stopped at {now_s:.1f} s, past its deadline of {deadline_s:.1f} s without reaching {target}"
    return Pruned(why, now_s, deadline_s)


def pruned(target: Target, evals: list[dict[str, Any]], deadline_s: float | None) -> Pruned | None:
    """A trial stops after its latest evaluation (`evals`, TargetClock's records) short of `target` when overdue,
    or when at two evaluations in a row (one noisy reading does not stop it) its recent pace (`soonest`) would
    bring it there only after the deadline. A curve that speeds up late (a long warm-up) can be stopped wrongly:
    `accel tune --no-prune`."""
    if deadline_s is None or not evals or any(target.reached(e["value"]) for e in evals):
        return None
    last = evals[-1]
    if late := overdue(target, last["wall_s"], deadline_s):
        return late
    if len(evals) <= PACE_EVALS:
        return None
    soonest = min(_soonest(target, evals), _soonest(target, evals[:-1]))
    if soonest <= deadline_s:
        return None
    if math.isfinite(soonest):
        said = f"at its recent pace it would reach {target} at {soonest:.1f} s at the soonest, past its deadline of"
    else:
        said = f"it has not moved toward {target} lately, so it would not reach it by its deadline of"
    why = f"stopped at {last['wall_s']:.1f} s: {said} {deadline_s:.1f} s"
    return Pruned(why, last["wall_s"], deadline_s)


def _soonest(target: Target, evals: list[dict[str, Any]]) -> float:
    """When the last of `evals` would reach `target` at the steepest pace of the chords to it from the readings
    before it (the last PACE_EVALS in all); infinite when none moved toward it. A validation loss falls ever more
    slowly (its curve is convex), so no later pace is faster than a chord's up to now: this is the soonest it can."""
    last, sign = evals[-1], 1.0 if target.minimise else -1.0  # progress toward the target is > 0
    paces = [
        sign * (e["value"] - last["value"]) / (last["wall_s"] - e["wall_s"])
        for e in evals[-PACE_EVALS:-1]
        if last["wall_s"] > e["wall_s"]
    ]
    pace = max(paces, default=0.0)
    return last["wall_s"] + sign * (last["value"] - target.value) / pace if pace > 0 else math.inf
