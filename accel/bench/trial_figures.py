"""A trial's figures from its optimizer steps: one home for a recipe's trial (bench/trial.py), a script's engine
(trial/engine_agent.py) and an unchanged script's instrument (trial/instrument/).

A step is a dict of its seconds (`s`), `samples`, `tokens` and data wait (`data_s`); a script's steps come as
cumulative marks (`t` and counts) taken at the end of each optimizer step, which `deltas` turns into steps.

The timed window: every kind of trial times steps after its `--warmup` until it has `--steps` of them and, with a
`--window`, that many seconds of them (`TimedWindow`); then the leading steps that are one-off costs are moved into
the warm-up (`steady`): the throughput is the steady state's, and what was cut counts as start-up."""

from __future__ import annotations

import math
import statistics
from typing import Any

LAST_LOSS_STEPS = 5  # final_loss averages this many last timed steps: one step's loss is too noisy to compare
NOT_COUNTS = ("t", "wall")  # a mark's clock readings; its other entries are counts
# A leading timed step is a one-off cost (a first hooked forward, a lazy allocation, a late compilation) when it is
# SLOW times the window's median step or more, and no later step is ECHO of it or more. The median is the window's
# own bulk, so a variant slow in every step is never cut: its median is slow too. The echo test keeps a cost that
# recurs (logging every N steps, a periodic stall) in the window: a leading step of that kind is not a start-up, and
# cutting it alone would read the variant faster than it trains; a neighbour's short stall later in the window (a
# fraction of a one-off's size) does not keep the one-off in. The longest leading run that passes is cut: a one-off
# followed by a step that is merely slowish (cold caches after a long stall) loses only the one-off. Fewer than half
# the steps can be SLOW times the median, so a cut leaves most of the window; one that would leave fewer than
# MIN_STEADY steps is not made (and said).
SLOW, ECHO, MIN_STEADY = 3.0, 0.5, 3
MAX_WINDOW_STEPS = 10_000  # a --window of tiny steps stops here (and says so): a record of step times stays small


def deltas(marks: list[dict[str, Any]], before: dict[str, Any]) -> list[dict[str, Any]]:
    """Each step from cumulative marks, the first from `before` (a mark, or `{"t": start}`: counts from zero)."""
    steps = []
    for mark in marks:
        counts = {k: v - before.get(k, 0) for k, v in mark.items() if k not in NOT_COUNTS}
        steps.append({"s": mark["t"] - before["t"], **counts})
        before = mark
    return steps


def one_off_steps(times: list[float]) -> int:
    """How many leading step times are one-off costs (SLOW, ECHO above); 0 when none are."""
    if not times:
        return 0
    bulk = statistics.median(times)
    run = next((i for i, s in enumerate(times) if s < SLOW * bulk), len(times))
    return next((k for k in range(run, 0, -1) if max(times[k:], default=0.0) < ECHO * min(times[:k])), 0)


def steady(timed: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """The timed steps split into the leading one-offs (start-up: the caller adds them to its warm-up) and the
    steady steps, with what the record says of the cut (`warmup_cut`, and `window_note` where it was not made)."""
    cut = one_off_steps([s["s"] for s in timed])
    if cut and len(timed) - cut < MIN_STEADY:
        note = (
            f"the first {cut} timed step(s) look like start-up (at least {SLOW:g}x the median step) but cutting "
            f"them would leave {len(timed) - cut} of {len(timed)}: kept in the window; give more --steps"
        )
        return [], timed, {"warmup_cut": 0, "window_note": note}
    return timed[:cut], timed[cut:], {"warmup_cut": cut}


class TimedWindow:
    """A trial's timed window as its steps end (`add` each timed step's seconds): full once it holds `steps`
    steady steps and, with `seconds`, that many seconds of them (the count alone: the leading one-offs are cut
    from it afterwards, not made up for), or MAX_WINDOW_STEPS. The cut is judged only when the window is due
    (`due`: the count and seconds it must reach first), so a step's check costs it nothing measurable."""

    def __init__(self, steps: int, seconds: float = 0.0) -> None:
        self.steps, self.seconds = steps, seconds
        self.times: list[float] = []
        self.total = 0.0
        self.due = (steps, seconds)

    def add(self, seconds: float) -> bool:
        """One more timed step; whether the window is full."""
        self.times.append(seconds)
        self.total += seconds
        if len(self.times) >= max(self.steps, MAX_WINDOW_STEPS):
            return True
        if len(self.times) < self.due[0] or self.total < self.due[1]:
            return False
        if not self.seconds:
            return True
        cut = one_off_steps(self.times)
        self.due = (self.steps + cut, self.seconds + sum(self.times[:cut]))
        return len(self.times) >= self.due[0] and self.total >= self.due[1]


def window_short(times: list[float], window_s: float) -> dict[str, str]:
    """What the record says of a window that holds fewer seconds than asked (the script ended first, or
    MAX_WINDOW_STEPS)."""
    held = sum(times[one_off_steps(times) :])
    if not window_s or held >= window_s:
        return {}
    why = f"{MAX_WINDOW_STEPS} steps" if len(times) >= MAX_WINDOW_STEPS else "the script's last step"
    return {"window_note": f"the timed window held {held:.3g} s of the {window_s:g} s asked (--window): {why}"}


def rates(timed: list[dict[str, Any]], data_known: bool = True, total_s: float | None = None) -> dict[str, Any]:
    """Throughput over the timed steps, and each step's time. `total_s`: the timed window's wall time where the
    device was synchronised around the window only (it holds the work the steps left queued); data wait only where
    a loader was watched (without one the wait is unknown, not zero)."""
    total = total_s or sum(s["s"] for s in timed)
    tokens = sum(s["tokens"] for s in timed)
    step_rates = [s["samples"] / s["s"] for s in timed if s["s"] > 0]
    return {
        "samples_per_s": sum(s["samples"] for s in timed) / total if total > 0 else None,
        # robust to a shared machine's stalls: one stalled step moves the mean above 10-20%, not the median
        "median_step_samples_per_s": statistics.median(step_rates) if step_rates else None,
        "tokens_per_s": tokens / total if tokens and total > 0 else None,
        "step_times_s": [s["s"] for s in timed],
        "data_wait_fraction": sum(s["data_s"] for s in timed) / total if data_known and total > 0 else None,
        "steps": len(timed),
    }


def final_loss(losses: list[float]) -> float | None:
    """The mean of the last timed steps' losses."""
    last = losses[-LAST_LOSS_STEPS:]
    return sum(last) / len(last) if last else None


def ran_out(done: int, warmup: int, steps: int) -> str:
    """A script that ended before the steps a trial asked for."""
    return (
        f"the script ended after {done} of the {warmup + steps} optimizer steps the bench asked for ({warmup} "
        f"warm-up + {steps}): give it more steps through its own arguments, or fewer --steps/--warmup"
    )


def target_figures(
    target: Any,
    metric: str,
    evals: list[dict[str, Any]],
    steps: int,
    where: str,
    fix: str,
    logged: set[str],
    pruned: Any = None,
) -> dict[str, Any]:
    """The time to `target` from each logged value of its `metric` (`evals`); an error when the script logged
    none in its `steps` optimizer steps (`where` it logs, the names it `logged`, and the `fix` that has it log
    the metric within a trial), which stops the bench (`never_logged`); and why tune's pruner stopped it, if it did."""
    from .target import time_to

    if not evals:
        said = ", ".join(f"`{name}`" for name in sorted(logged)) or "nothing"
        error = f"the script logged no `{metric}` {where}in its {steps} optimizer steps (it logged {said}): {fix}"
        return {"error": error, "unlogged_metric": metric}
    reached = time_to(target, evals) if target else None
    figures = {"time_to_target_s": reached, "target_evals": evals, "val_metric_name": metric}
    return figures | (pruned.record() if pruned else {})  # accel.bench.pruner.Pruned


def never_logged(result: Any, earlier: list[Any], left: int) -> str | None:
    """Why the bench stops after `result`: it never logged the metric a target or curve needs, nor did any
    `earlier` trial, so every trial would fail the same way after its whole run (minutes under compile); None
    otherwise."""
    metric = result.unlogged_metric
    if metric is None or any(r.target_evals for r in earlier):
        return None
    return f"{result.error.rstrip('.')}. The remaining {left} trial(s) would fail the same way: not run."


def diverged(losses: list[float]) -> dict[str, str]:
    """A trial whose loss went NaN or infinite failed, as a recipe's diverged run does; its figures are kept."""
    bad = next((i for i, loss in enumerate(losses) if not math.isfinite(loss)), None)
    if bad is None:
        return {}
    return {"error": f"diverged: the training loss was {losses[bad]} at optimizer step {bad + 1} (warm-up included)"}
