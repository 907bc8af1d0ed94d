"""Where a series of per-commit figures stepped: binary segmentation on the log of the figure (docs/bench.md says
why this test). Pure numpy.

A regression is a step in level, not a trend, so the series is split where two flat levels fit it best (least
squares on the logs, so a 10% step weighs the same at any speed); the split is kept when the step is at least
`MIN_STEP` and at least `Z` noise units (the difference of the two means over its standard error); then each side
is searched again. The noise is the larger of two estimates: the scatter between neighbouring commits (1.4826 x
the median absolute first difference / sqrt 2, which a few real steps leave alone) and the benches' own interval
half-widths, so a short series whose neighbours all differ by a step still has a noise floor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MIN_STEP = 0.05  # a step below 5% is not marked, however steady the series: within a day's drift of a machine
Z = 4.0  # noise units: few false marks across a history of hundreds of commits
NORMAL_95 = 1.96
MAD_TO_SIGMA = 1.4826


def noise(logs: np.ndarray, half_widths: Sequence[float] = ()) -> float:
    """One commit's standard deviation in log units (see the module's docstring)."""
    diffs = np.abs(np.diff(logs))
    between = MAD_TO_SIGMA * float(np.median(diffs)) / math.sqrt(2) if diffs.size >= 4 else 0.0
    within = float(np.median(half_widths)) / NORMAL_95 if len(half_widths) else 0.0
    return max(between, within)


def _best_split(logs: np.ndarray) -> tuple[int, float, float]:
    """(index, step in logs, its standard-error factor sqrt(1/n1 + 1/n2)) of the split that best fits two levels."""
    best = (0, 0.0, 1.0)
    best_cost = math.inf
    for k in range(1, logs.size):
        left, right = logs[:k], logs[k:]
        cost = float(((left - left.mean()) ** 2).sum() + ((right - right.mean()) ** 2).sum())
        if cost < best_cost:
            best_cost = cost
            best = (k, float(right.mean() - left.mean()), math.sqrt(1 / k + 1 / (logs.size - k)))
    return best


def change_points(values: Sequence[float], half_widths: Sequence[float] = ()) -> dict[int, float]:
    """{index: relative step} for each index where the series stepped (values[index] starts the new level; -0.48 is
    48% lower); `half_widths` are each value's 95% interval half-widths in log units, where known."""
    logs = np.log(np.asarray(values, dtype=float))
    sigma = noise(logs, half_widths)
    found: dict[int, float] = {}

    def search(lo: int, hi: int) -> None:
        if hi - lo < 2:
            return
        k, step, factor = _best_split(logs[lo:hi])
        if abs(step) < math.log1p(MIN_STEP) or abs(step) <= Z * sigma * factor:
            return
        found[lo + k] = math.expm1(step)
        search(lo, lo + k)
        search(lo + k, hi)

    search(0, logs.size)
    return dict(sorted(found.items()))
