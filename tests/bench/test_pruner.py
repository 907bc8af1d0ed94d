"""tune's pruner: the rule a trial timed to a target stops by (accel.bench.pruner), the deadline the runner gives
each candidate from the reference beside it, and a real recipe trial that stops short of its target."""

from __future__ import annotations

import json

import pytest

from accel.bench.pruner import PRUNE_SLACK, overdue, pruned
from accel.bench.records import Trial
from accel.bench.runner import with_deadline
from accel.bench.target import Target
from accel.bench.trial_process import TrialSettings

LOSS, ACCURACY = Target("val_loss", 2.0), Target("val_accuracy", 0.9)


def curve(*points: tuple[float, float]) -> list[dict]:
    return [{"step": i, "wall_s": t, "value": v} for i, (t, v) in enumerate(points)]


def test_a_trial_on_its_way_to_the_target_in_time_runs_on():
    # 0.1/s: from 2.4 at 7 s, 4 s more to 2.0, at 11 s: within a deadline of 12 s
    on_its_way = curve((1, 3.0), (3, 2.8), (5, 2.6), (7, 2.4))
    assert pruned(LOSS, on_its_way, 12.0) is None
    assert pruned(LOSS, on_its_way, None) is None  # no deadline: never
    assert pruned(LOSS, curve((1, 3.0), (3, 1.9), (5, 2.6), (7, 2.7)), 6.0) is None  # reached: its time is measured


def test_a_trial_too_slow_at_its_recent_pace_at_two_readings_in_a_row_stops():
    # fast at first (0.25/s), slow since: 0.025-0.0375/s, which would take it to 2.0 after 16 s at the soonest
    slowing = curve((1, 3.0), (3, 2.5), (5, 2.4), (7, 2.35), (9, 2.3))
    assert pruned(LOSS, slowing[:3], 12.0) is None  # three readings: no pace read yet
    stop = pruned(LOSS, slowing, 12.0)
    assert stop is not None and stop.at_s == 9 and stop.deadline_s == 12.0
    assert "it would reach val_loss<=2 at 16.3 s at the soonest, past its deadline of 12.0 s" in stop.why
    assert stop.record() == {"pruned": stop.why, "pruned_saved_s": 3.0}
    assert pruned(LOSS, slowing, 17.0) is None  # the reading before said 16.3 s: not missed twice
    # a higher-is-better metric, the same way round
    rising = curve((1, 0.5), (3, 0.6), (5, 0.65), (7, 0.7))  # 0.025-0.0375/s: 0.9 at 11.7 s at the soonest
    assert pruned(ACCURACY, rising, 12.0) is None and pruned(ACCURACY, rising, 11.0).at_s == 7


def test_one_noisy_reading_does_not_stop_a_trial_but_a_curve_that_never_moves_does():
    # 2.35 after 2.3 reads as slow, but the reading before it was on course (6.7 s): it runs on
    assert pruned(LOSS, curve((1, 3.0), (3, 2.6), (5, 2.3), (7, 2.35)), 10.0) is None
    stop = pruned(LOSS, curve((1, 3.0), (3, 3.1), (5, 3.2), (7, 3.3)), 10.0)
    assert stop is not None and "it has not moved toward val_loss<=2 lately" in stop.why


def test_a_trial_past_its_deadline_is_overdue_at_a_step_or_an_evaluation():
    assert overdue(LOSS, 9.9, 10.0) is None and overdue(LOSS, 11.0, None) is None
    late = overdue(LOSS, 11.0, 10.0)
    assert late.record() == {"pruned": late.why, "pruned_saved_s": 0.0}
    assert "past its deadline of 10.0 s without reaching val_loss<=2" in late.why
    assert pruned(LOSS, curve((1, 3.0), (11, 2.1)), 10.0).at_s == 11


def test_each_candidate_is_given_the_deadline_of_the_reference_in_its_own_round():
    settings = TrialSettings(steps=1, warmup=0, target="val_loss=2.0", stop_at_target=True, deadline_from="ref")
    done = [
        Trial(variant="ref", trial=0, time_to_target_s=10.0),
        Trial(variant="b", trial=0, time_to_target_s=5.0),
        Trial(variant="ref", trial=1, time_to_target_s=None),  # never got there: nothing to be sooner than
    ]
    assert with_deadline(settings, 0, "b", done).deadline_s == pytest.approx(PRUNE_SLACK * 10.0)
    assert with_deadline(settings, 0, "ref", done).deadline_s is None  # the reference runs to the target
    assert with_deadline(settings, 1, "b", done).deadline_s is None
    assert with_deadline(settings, 2, "b", done).deadline_s is None  # its round's reference has not run
    unpruned = TrialSettings(steps=1, warmup=0, target="val_loss=2.0", stop_at_target=True)
    assert with_deadline(unpruned, 0, "b", done) is unpruned


@pytest.mark.slow
def test_a_recipe_trial_stops_short_of_its_target_at_its_deadline(tiny, write_recipe, tmp_path):
    from accel.bench.trial import main as trial_main

    out, recipe = tmp_path / "t.json", str(write_recipe(tiny | {"data": tiny["data"] | {"batch_size": 8}}))
    argv = [recipe, "--steps", "1", "--warmup", "1", "--samples", "48", "--eval-every", "2", "--json", str(out)]
    never = ["--target", "val_loss=0.0", "--stop-at-target"]  # a loss no trial reaches
    assert trial_main([*argv, *never, "--deadline", "0.001"]) == 0  # past it at its first step
    stopped = json.loads(out.read_text())
    assert stopped["error"] is None and stopped["time_to_target_s"] is None
    assert "past its deadline of 0.0 s without reaching val_loss<=0" in stopped["pruned"]
    assert len(stopped["step_losses"]) < 6 and stopped["pruned_saved_s"] == 0.0
    assert trial_main([*argv, *never]) == 0  # no deadline: all 6 steps, not pruned
    whole = json.loads(out.read_text())
    assert len(whole["step_losses"]) == 6 and "pruned" not in whole
    assert trial_main([*argv, "--target", "val_loss=0.0", "--deadline", "5"]) == 1
    assert "--deadline needs --stop-at-target" in json.loads(out.read_text())["error"]
