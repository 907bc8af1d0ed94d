"""Small-sample statistics beside the verdicts (those are accel/bench/decide.py's): a median's bootstrap interval
for the comparison scripts in benchmarks/, percentiles, break-even, result drift.

Everything is pure numpy and seeded, so the same numbers always give the same report.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _as_array(xs: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(list(xs), dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{what} needs at least one number, got {list(xs)!r}")
    return arr


def _boot_medians(arr: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    # Vectorised: one (n_boot, n) draw with replacement, the median of each row.
    idx = rng.integers(0, arr.size, size=(n_boot, arr.size))
    return np.median(arr[idx], axis=1)


def _interval(samples: np.ndarray, level: float) -> tuple[float, float]:
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level}")
    lo, hi = np.percentile(samples, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def bootstrap_median_ci(
    xs: Sequence[float], *, n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """Median of `xs` and its percentile-bootstrap interval at `level`."""
    arr = _as_array(xs, "bootstrap_median_ci")
    rng = np.random.default_rng(seed)
    return float(np.median(arr)), _interval(_boot_medians(arr, n_boot, rng), level)


def percentiles(xs: Sequence[float], qs: Sequence[float] = (50, 90)) -> dict:
    """{"p50": x, "p90": y, ...} of `xs`; every value is None when `xs` is empty."""
    arr = np.asarray(list(xs), dtype=float)
    keys = [f"p{q:g}" for q in qs]
    if arr.size == 0:
        return dict.fromkeys(keys)
    return {k: float(v) for k, v in zip(keys, np.percentile(arr, list(qs)))}


def break_even_steps(
    first_step_s_variant: float,
    first_step_s_base: float,
    step_s_variant: float,
    step_s_base: float,
) -> float | None:
    """Steps after which the variant's faster steady state has repaid its extra start-up time.

    None when the variant is not faster in steady state (it never repays anything); 0.0 when it is faster
    and starts no slower. Step times must describe the same amount of work (scale for batch size first).
    """
    saving = step_s_base - step_s_variant
    if saving <= 0:
        return None
    extra = first_step_s_variant - first_step_s_base
    if extra <= 0:
        return 0.0
    return float(extra / saving)


NOISE_SDS = 3  # how many standard deviations of the trials' own spread a changed result must move


def differs_beyond_noise(
    variant_values: Sequence[float],
    baseline_values: Sequence[float],
    *,
    rel_tol: float = 0.05,
    abs_tol: float = 1e-3,
    seed: int = 0,
) -> bool | None:
    """Whether a result (final loss, accuracy) of the variant differs from baseline's beyond noise.

    Rule: the 95% bootstrap intervals of the two medians do not overlap, the medians differ by more than
    max(rel_tol * |baseline median|, abs_tol), AND by more than NOISE_SDS standard deviations of the noisier side.
    Seeded CPU runs often repeat exactly, so intervals have zero width and any bf16 rounding would count as a
    change without the tolerance, while a tolerance alone would flag noisy-but-equal results. With 2-3 trials the
    intervals are the trials' ranges, and two pairs of draws from one noise lie apart 1 time in 3 (an unseeded
    script's loss): the distance in standard deviations brings that to about 1 in 16 for 2 trials a side, 1 in
    80 for 3, while a shift of 6 of them is still found 9 times in 10 (simulated). A variant that went
    non-finite (diverged) while the baseline stayed finite differs; empty inputs do not (nothing to compare).
    Otherwise a side with a single value shows no noise at all (an unseeded script's one run, a chaotic early
    loss): None, not known.
    """
    v = np.asarray([x for x in variant_values if x is not None], dtype=float)
    b = np.asarray([x for x in baseline_values if x is not None], dtype=float)
    if v.size == 0 or b.size == 0:
        return False
    v_ok, b_ok = bool(np.isfinite(v).all()), bool(np.isfinite(b).all())
    if v_ok != b_ok:
        return True
    if not v_ok:
        return False
    if min(v.size, b.size) < 2:
        return None
    vm, (vlo, vhi) = bootstrap_median_ci(v, seed=seed)
    bm, (blo, bhi) = bootstrap_median_ci(b, seed=seed)
    apart = vlo > bhi or vhi < blo
    noise = NOISE_SDS * max(float(np.std(v, ddof=1)), float(np.std(b, ddof=1)))
    return apart and abs(vm - bm) > max(rel_tol * abs(bm), abs_tol, noise)
