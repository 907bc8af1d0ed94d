"""tune's pruner: the rule a trial timed to a target stops by (accel.bench.prune), the deadline the runner gives
each candidate from the reference beside it, and a real recipe trial that stops short of its target."""

from __future__ import annotations

import json

import pytest

from accel.bench.prune import PRUNE_SLACK, overdue, pruned
from accel.bench.records import Trial
from accel.bench.runner import with_deadline
from accel.bench.target import Target
from accel.bench.trial_process import TrialSettings

LOSS, ACCURACY = Target("val_loss", 2.0), Target("val_accuracy", 0.9)


def curve(*points: tuple[float, float]) -> list[dict]:
    return [{"step": i, "wall_s": t, "value": v} for i, (t, v) in enumerate(points)]


def test_a_trial_on_its_way_to_the_target_in_time_runs_on():
    # 3.0 -> 2.6 in 4 s: 0.1/s, 6 s more to 2.0, at 10 s: within a deadline of 12 s
    assert pruned(LOSS, curve((1, 3.0), (3, 2.8), (5, 2.6)), 12.0) is None
    assert pruned(LOSS, curve((1, 3.0), (3, 2.8), (5, 2.6)), None) is None  # no deadline: never
    assert pruned(LOSS, curve((1, 3.0), (3, 1.9), (5, 2.6)), 6.0) is None  # reached once: its time is measured


def test_a_trial_too_slow_at_its_fastest_pace_stops_with_the_soonest_it_could_get_there():
    # its fastest pace is the first stretch, 0.1/s (the loss falls ever more slowly): 2.7 -> 2.0 takes 7 s more
    stop = pruned(LOSS, curve((1, 3.0), (3, 2.8), (5, 2.7)), 10.0)
    assert stop is not None and stop.at_s == 5 and stop.deadline_s == 10.0
    assert "at 12.0 s at the soonest, past its deadline of 10.0 s" in stop.why
    assert stop.record() == {"pruned": stop.why, "pruned_saved_s": 5.0}
    # a higher-is-better metric, the same way round
    assert pruned(ACCURACY, curve((1, 0.5), (3, 0.6), (5, 0.65)), 10.0) is None  # 0.05/s: there at 10 s
    assert pruned(ACCURACY, curve((1, 0.5), (3, 0.6), (5, 0.65)), 9.0).at_s == 5


def test_a_curve_that_has_not_moved_toward_the_target_stops_but_two_readings_are_not_enough():
    assert pruned(LOSS, curve((1, 3.0), (3, 3.1)), 10.0) is None  # one noisy step between two says nothing
    stop = pruned(LOSS, curve((1, 3.0), (3, 3.1), (5, 3.2)), 10.0)
    assert stop is not None and "never: it has not moved toward it" in stop.why


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
