"""A trial's figures from its optimizer steps: one home for a recipe's trial (bench/trial.py), a script's engine
(bench/engine_trial.py) and an unchanged script's instrument (bench/instrument/).

A step is a dict of its seconds (`s`), `samples`, `tokens` and data wait (`data_s`); a script's steps come as
cumulative marks (`t` and counts) taken at the end of each optimizer step, which `deltas` turns into steps."""

from __future__ import annotations

import math
import statistics
from typing import Any

LAST_LOSS_STEPS = 5  # final_loss averages this many last timed steps: one step's loss is too noisy to compare
NOT_COUNTS = ("t", "wall")  # a mark's clock readings; its other entries are counts


def deltas(marks: list[dict[str, Any]], before: dict[str, Any]) -> list[dict[str, Any]]:
    """Each step from cumulative marks, the first from `before` (a mark, or `{"t": start}`: counts from zero)."""
    steps = []
    for mark in marks:
        counts = {k: v - before.get(k, 0) for k, v in mark.items() if k not in NOT_COUNTS}
        steps.append({"s": mark["t"] - before["t"], **counts})
        before = mark
    return steps


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
    target: Any, metric: str, evals: list[dict[str, Any]], steps: int, where: str, fix: str, logged: set[str]
) -> dict[str, Any]:
    """The time to `target` from each logged value of its `metric` (`evals`); an error when the script logged
    none in its `steps` optimizer steps (`where` it logs, the names it `logged`, and the `fix` that has it log
    the metric within a trial), which stops the bench (`never_logged`)."""
    from .target import time_to

    if not evals:
        said = ", ".join(f"`{name}`" for name in sorted(logged)) or "nothing"
        error = f"the script logged no `{metric}` {where}in its {steps} optimizer steps (it logged {said}): {fix}"
        return {"error": error, "unlogged_metric": metric}
    reached = time_to(target, evals) if target else None
    return {"time_to_target_s": reached, "target_evals": evals, "val_metric_name": metric}


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
