import math

import pytest

from accel.bench.stats import (
    bootstrap_median_ci,
    break_even_steps,
    differs_beyond_noise,
    percentiles,
)


def test_median_ci_of_three_trials_spans_min_to_max():
    # With 3 trials the bootstrap median is the smallest value 7/27 of the time, so a 95% interval is [min, max].
    median, (lo, hi) = bootstrap_median_ci([3.0, 1.0, 2.0])
    assert median == 2.0
    assert (lo, hi) == (1.0, 3.0)


def test_median_ci_of_one_trial_has_zero_width():
    assert bootstrap_median_ci([5.0]) == (5.0, (5.0, 5.0))


def test_median_ci_narrows_with_more_data_and_is_seeded():
    few = bootstrap_median_ci([9.0, 10.0, 11.0, 10.5, 9.5])
    many = bootstrap_median_ci([9.0, 10.0, 11.0, 10.5, 9.5] * 20)
    assert many[1][1] - many[1][0] < few[1][1] - few[1][0]
    assert bootstrap_median_ci([1.0, 4.0, 2.0, 8.0], seed=3) == bootstrap_median_ci([1.0, 4.0, 2.0, 8.0], seed=3)


def test_empty_input_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_median_ci([])


def test_break_even_arithmetic():
    # 25 s extra start-up repaid at 0.5 s per step -> 50 steps.
    assert break_even_steps(30.0, 5.0, 0.5, 1.0) == pytest.approx(50.0)
    assert break_even_steps(4.0, 5.0, 0.5, 1.0) == 0.0  # faster and no extra start-up
    assert break_even_steps(30.0, 5.0, 1.0, 1.0) is None  # never faster, never repays
    assert break_even_steps(3.0, 5.0, 1.2, 1.0) is None


def test_percentiles():
    p = percentiles([float(i) for i in range(1, 11)])
    assert p == {"p50": pytest.approx(5.5), "p90": pytest.approx(9.1)}
    assert percentiles([], qs=(50, 99)) == {"p50": None, "p99": None}


def test_differs_beyond_noise_rule():
    assert not differs_beyond_noise([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    # Zero-width intervals that do not overlap, but within 5%: bf16-sized rounding is not a change.
    assert not differs_beyond_noise([1.01] * 3, [1.0] * 3)
    assert differs_beyond_noise([1.5] * 3, [1.0] * 3)
    # 25% apart but the trials overlap: noise, not a change.
    assert not differs_beyond_noise([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])
    assert differs_beyond_noise([math.nan, 1.0], [1.0, 1.0])  # diverged
    assert not differs_beyond_noise([], [1.0])
    assert not differs_beyond_noise([None], [1.0])
    # One run a side shows no noise: 50% apart is not known to be a change, but a divergence is.
    assert differs_beyond_noise([1.5], [1.0]) is None
    assert differs_beyond_noise([1.5, 1.5], [1.0]) is None
    assert differs_beyond_noise([math.nan], [1.0]) is True
    # Two trials a side of an unseeded script whose variant changes nothing: apart, 19% apart, but by less than
    # three of their own standard deviations (2.05): noise.
    assert not differs_beyond_noise([-24.99, -23.84], [-22.04, -19.14])
    assert differs_beyond_noise([-34.99, -33.84], [-22.04, -19.14])
