"""Small-sample statistics for A/B speed reports: bootstrap intervals, verdicts, break-even, result drift.

Everything is pure numpy and seeded, so the same trials always give the same report. Benchmarks here run
3-10 trials per variant, so the bootstrap is used for its honesty, not its precision: with 3 trials a
95% interval of a median is roughly [min, max] of the trials, which is what a reader should see.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .records import Verdict


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


def bootstrap_ratio_ci(
    variant_xs: Sequence[float],
    baseline_xs: Sequence[float],
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, tuple[float, float]]:
    """median(variant) / median(baseline) and a bootstrap interval of that ratio.

    The groups are resampled independently: trials of different variants are separate processes, so there is
    no pairing to exploit (interleaving already spreads machine drift over all variants alike).
    """
    v = _as_array(variant_xs, "bootstrap_ratio_ci (variant)")
    b = _as_array(baseline_xs, "bootstrap_ratio_ci (baseline)")
    if np.median(b) <= 0:
        raise ValueError(f"baseline median must be positive to form a ratio, got {np.median(b)}")
    rng = np.random.default_rng(seed)
    vm, bm = _boot_medians(v, n_boot, rng), _boot_medians(b, n_boot, rng)
    ratios = vm / np.where(bm > 0, bm, np.nan)
    ratios = ratios[np.isfinite(ratios)]
    return float(np.median(v) / np.median(b)), _interval(ratios, level)


def percentiles(xs: Sequence[float], qs: Sequence[float] = (50, 90)) -> dict:
    """{"p50": x, "p90": y, ...} of `xs`; every value is None when `xs` is empty."""
    arr = np.asarray(list(xs), dtype=float)
    keys = [f"p{q:g}" for q in qs]
    if arr.size == 0:
        return dict.fromkeys(keys)
    return {k: float(v) for k, v in zip(keys, np.percentile(arr, list(qs)))}


def verdict(ratio_median: float, ci: Sequence[float], *, min_effect: float = 0.02) -> Verdict:
    """Helped, hurt or no effect for a throughput ratio vs baseline, decided by its interval.

    The interval must exclude 1.0 *and* the point estimate must clear `min_effect`. The margin exists because
    3-trial bootstraps are coarse: the interval is about [min(v)/max(b), max(v)/min(b)], so a change that does
    nothing still lands all its trials above the baseline's in 1 of the C(6,3) = 20 equally likely orderings,
    and would be called "helped" on a 0.3% difference. Requiring a 2% effect keeps such flukes "no effect".
    """
    lo, hi = float(ci[0]), float(ci[1])
    if lo > 1.0 and ratio_median >= 1.0 + min_effect:
        return Verdict.HELPED
    if hi < 1.0 and ratio_median <= 1.0 - min_effect:
        return Verdict.HURT
    return Verdict.NO_EFFECT


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
