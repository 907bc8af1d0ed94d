"""The timed window's rules (accel/bench/trial_figures.py) on made-up step times: which leading steps are start-up,
and when a window by time is full."""

from __future__ import annotations

import random

from accel.bench.trial_figures import MAX_WINDOW_STEPS, TimedWindow, one_off_steps, steady, window_short


def _steps(times: list[float]) -> list[dict]:
    return [{"s": s, "samples": 8, "tokens": 0, "data_s": 0.0} for s in times]


def _noisy(n: int, step: float = 0.005, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [step * rng.uniform(0.8, 1.3) for _ in range(n)]


def test_a_first_hooked_forward_is_cut_as_start_up():
    times = [0.4, *_noisy(19)]  # the instrument's first hooked forward: 80x a 5 ms step
    cut, timed, said = steady(_steps(times))
    assert [s["s"] for s in cut] == [0.4] and len(timed) == 19
    assert said == {"warmup_cut": 1}
    assert one_off_steps([0.4, 0.09, *_noisy(18)]) == 2  # a run of leading one-offs goes together


def test_a_variant_slow_in_every_step_is_never_cut():
    for seed in range(50):
        times = _noisy(20, step=2.0, seed=seed)  # steady, however slow: its median is slow too
        assert one_off_steps(times) == 0
    assert one_off_steps([0.03] * 20) == 0


def test_a_spike_in_the_middle_is_not_a_warm_up():
    times = _noisy(20)
    times[10] = 0.4
    assert one_off_steps(times) == 0
    assert steady(_steps(times))[2] == {"warmup_cut": 0}


def test_a_cost_that_recurs_is_kept_in_the_window():
    times = [0.02 if i % 5 == 0 else 0.005 for i in range(20)]  # logging every 5 steps, the window opens on one
    assert one_off_steps(times) == 0
    times = [0.4, *_noisy(10), 0.03, *_noisy(8)]  # a neighbour's short stall later: the one-off still goes
    assert one_off_steps(times) == 1
    times = [2.0, 0.02, *_noisy(10), 0.012, *_noisy(8)]  # a slowish step after the one-off, a stall echoing it
    assert one_off_steps(times) == 1  # the one-off still goes; the slowish step stays in the window


def test_a_cut_that_leaves_too_few_steps_is_not_made_and_said():
    cut, timed, said = steady(_steps([0.4, 0.005, 0.005]))
    assert cut == [] and len(timed) == 3
    assert said["warmup_cut"] == 0 and "kept in the window" in said["window_note"]


def test_the_window_by_count_alone_does_not_make_up_for_a_cut():
    window = TimedWindow(steps=3)
    assert [window.add(s) for s in (0.4, 0.005, 0.005)] == [False, False, True]


def test_the_window_by_time_holds_its_seconds_of_steady_steps():
    window = TimedWindow(steps=5, seconds=0.1)
    full = [window.add(s) for s in [0.4] + [0.01] * 12]  # the 0.4 s one-off is no part of the 0.1 s
    assert full.index(True) == 10  # 10 steady steps of 10 ms after the cut one
    small = TimedWindow(steps=20, seconds=0.01)
    assert [small.add(0.005) for _ in range(20)].index(True) == 19  # the count, where the time came first


def test_a_window_of_tiny_steps_stops_at_the_cap_and_says_so():
    window = TimedWindow(steps=3, seconds=3600)
    assert not any(window.add(1e-6) for _ in range(MAX_WINDOW_STEPS - 1)) and window.add(1e-6)
    assert f"{MAX_WINDOW_STEPS} steps" in window_short(window.times, 3600)["window_note"]
    assert "the script's last step" in window_short([0.01] * 5, 1.0)["window_note"]
    assert window_short([0.01] * 5, 0.0) == {} and window_short([0.5] * 5, 1.0) == {}
