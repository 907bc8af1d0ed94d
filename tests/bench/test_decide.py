"""The one decision rule (accel/bench/decide.py): paired by round, a resolution, and intervals whose coverage is
what their label says at whichever look a sequential bench stops."""

import math

import numpy as np
import pytest

from accel.bench.decide import (
    LEVEL,
    Rule,
    compare_rates,
    judge,
    look_schedule,
    pocock_level,
    spread_interval,
    trial_rate,
)
from accel.bench.records import Trial, Verdict


def rounds(*rates: float) -> dict[int, float]:
    return dict(enumerate(rates))


def test_one_trial_a_side_gives_a_ratio_but_no_interval_or_verdict():
    said = compare_rates(rounds(200.0), rounds(100.0))
    assert said.ratio == pytest.approx(2.0) and said.ci is None and said.verdict is None


def test_rounds_are_paired_so_drift_shared_by_a_round_cancels():
    # the machine's speed drifts 2x over the bench; the variant is 10% faster within every round
    base = [100.0, 140.0, 70.0, 200.0, 120.0]
    said = compare_rates(rounds(*[1.1 * b for b in base]), rounds(*base), Rule(resolution=0.03))
    assert said.pairs == 5 and said.ratio == pytest.approx(1.1)
    assert said.verdict == Verdict.HELPED and said.ci[0] > 1.0
    # the same figures with their rounds shuffled on one side cannot be paired alike: no verdict
    shuffled = compare_rates(rounds(*[1.1 * b for b in base[::-1]]), rounds(*base), Rule(resolution=0.03))
    assert shuffled.verdict is None and shuffled.undecided


@pytest.mark.parametrize(
    "mean, lo, hi, expected",
    [
        (0.05, 0.02, 0.08, (Verdict.HELPED, False)),
        (-0.05, -0.08, -0.02, (Verdict.HURT, False)),
        (0.0, -0.02, 0.02, (Verdict.NO_EFFECT, False)),  # all of it within +-3%: no change that large
        (0.0, -0.10, 0.10, (None, True)),  # wide: undecided, never "no effect"
        (0.01, 0.001, 0.02, (Verdict.NO_EFFECT, False)),  # above 1 but below half the resolution: within it
        (0.012, 0.001, 0.035, (None, True)),  # above 1, small, and reaching past the resolution
    ],
)
def test_the_verdict_at_a_resolution_of_3_percent(mean, lo, hi, expected):
    assert judge(mean, lo, hi, 0.03) == expected


def test_a_busy_machine_withholds_the_verdict_but_keeps_the_ratio():
    said = compare_rates(rounds(200, 210, 205), rounds(100, 101, 99), busy=True)
    assert said.verdict is None and not said.undecided and said.ratio == pytest.approx(2.04, rel=0.02)


def test_a_stalled_step_is_capped_while_steps_all_slow_alike_are_not():
    steady = [0.01] * 19
    stalled = Trial(samples_per_s=100 * 20 / (0.19 + 0.5), step_times_s=[*steady, 0.5])
    assert trial_rate(stalled) == pytest.approx(100 * 20 / 0.2, rel=0.05)
    slow = Trial(samples_per_s=50.0, step_times_s=[0.02] * 20)
    assert trial_rate(slow) == 50.0
    assert trial_rate(Trial(samples_per_s=50.0)) == 50.0  # no step times: as measured
    # a cost that comes back (a loader behind every 8th step) is the variant's own: nothing is capped
    recurring = Trial(samples_per_s=1702.0, step_times_s=([0.01] * 7 + [0.08]) * 6)
    assert trial_rate(recurring) == 1702.0


def test_a_baseline_that_ran_more_rounds_still_pairs_with_a_variant_that_ran_fewer():
    base = [100.0, 140.0, 70.0, 200.0, 120.0, 90.0, 160.0, 110.0, 130.0, 80.0, 150.0, 100.0]
    said = compare_rates(rounds(*[1.1 * b for b in base[:3]]), rounds(*base), Rule(resolution=0.03))
    assert said.pairs == 3 and said.ratio == pytest.approx(1.1)


def test_looks_grow_geometrically_and_each_look_is_wider_than_a_single_one():
    assert look_schedule(3, 3) == (3,)
    looks = look_schedule(3, 30)
    assert looks[0] == 3 and looks[-1] == 30 and len(looks) < 10
    assert Rule(looks=(3,)).per_look_level == LEVEL
    assert LEVEL < pocock_level(looks) < 0.999
    assert pocock_level((3, 5, 8)) < pocock_level(looks)  # more looks, wider each


def test_an_interval_of_the_trials_throughput():
    lo, hi = spread_interval([100.0, 110.0, 105.0])
    assert lo < 100.0 and hi > 110.0  # three trials: t with 2 degrees of freedom is wide
    assert spread_interval([100.0]) == (100.0, 100.0)


NOISES = {
    "normal": lambda rng, n: rng.normal(0, 0.1, n),
    "delays": lambda rng, n: -np.abs(rng.standard_t(3, n)) * 0.1,  # heavy-tailed, one-sided: a neighbour's stalls
    "bimodal": lambda rng, n: np.where(rng.random(n) < 0.2, -0.25, 0.0) + rng.normal(0, 0.03, n),
}


def sequential(rng, noise, effect: float, looks: tuple[int, ...], rule: Rule):
    drift = np.cumsum(rng.normal(0, 0.05, looks[-1]))  # shared by a round's trials
    lv = math.log1p(effect) + drift + noise(rng, looks[-1])
    lb = drift + noise(rng, looks[-1])
    for k in looks:
        said = compare_rates(rounds(*np.exp(lv[:k])), rounds(*np.exp(lb[:k])), rule)
        if not said.undecided:
            break
    return said


@pytest.mark.parametrize("shape", list(NOISES))
def test_a_sequential_bench_stopping_when_it_decides_keeps_its_coverage_and_its_false_alarms(shape):
    """An A/A bench that looks after every group of rounds and stops once it decides: its interval at the stop
    still covers the truth about 95 times in 100, and it calls the A/A helped or hurt about 5 times in 100 (a
    plain 95% interval at every look would call it about 3 times as often)."""
    rng, noise = np.random.default_rng(7), NOISES[shape]
    looks = look_schedule(3, 24)
    rule = Rule(resolution=0.05, looks=looks)
    big = noise(rng, 200_000)
    truth = 1.0  # both sides draw the same noise: the ratio of their typical figures is 1
    assert abs(big.mean() - noise(rng, 200_000).mean()) < 0.01
    said = [sequential(rng, noise, 0.0, looks, rule) for _ in range(400)]
    alarms = sum(s.verdict in (Verdict.HELPED, Verdict.HURT) for s in said) / len(said)
    covered = sum(s.ci[0] <= truth <= s.ci[1] for s in said) / len(said)
    assert alarms <= 0.07 and covered >= 0.93


def test_a_ten_percent_slowdown_is_found_when_the_noise_allows():
    rng = np.random.default_rng(3)
    looks = look_schedule(3, 30)  # 10% noise a trial: 30 rounds resolve 10% nine times in ten
    rule = Rule(resolution=0.05, looks=looks)
    said = [sequential(rng, NOISES["normal"], -0.10, looks, rule) for _ in range(200)]
    assert sum(s.verdict == Verdict.HURT for s in said) / len(said) >= 0.9
