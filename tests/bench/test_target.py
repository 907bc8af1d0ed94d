"""Time to target: losses count down, accuracies up; each trial is timed from its process start."""

from __future__ import annotations

import json

import pytest

from accel.bench.target import Target, check_target_metric, parse_target
from accel.bench.trial import main as trial_main
from accel.cli import main
from accel.errors import AccelError


def test_targets_know_which_way_is_better():
    loss, accuracy = parse_target("val_loss=1.5"), parse_target("val_accuracy=0.97")
    assert loss == Target("val_loss", 1.5) and loss.minimise and loss.reached(1.4) and not loss.reached(1.6)
    assert not accuracy.minimise and accuracy.reached(0.98) and not accuracy.reached(0.9)
    assert str(loss) == "val_loss<=1.5" and parse_target("val_perplexity=4").minimise
    with pytest.raises(AccelError, match="METRIC=VALUE"):
        parse_target("accuracy")


@pytest.mark.slow
def test_bench_reports_the_time_to_a_target_and_who_never_reached_it(tiny, write_recipe, tmp_path, capsys):
    out = tmp_path / "bench"
    # accuracy 0.0 is reached at the first evaluation, 1.01 never
    argv = [
        "bench",
        str(write_recipe(tiny)),
        "--set",
        "data.batch_size=4",
        "--vary",
        "optim.lr=0.05,0.1",
        "--steps",
        "4",
        "--warmup",
        "1",
        "--trials",
        "1",
        "--out",
        str(out),
        "--target",
        "val_accuracy=0.0",
        "--eval-every",
        "2",
    ]
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["target"] == "val_accuracy=0.0"
    for variant in report["variants"]:
        trial = variant["trials"][0]
        assert [e["step"] for e in trial["target_evals"]] == [2, 4]
        assert variant["time_to_target_s"] == trial["target_evals"][0]["wall_s"] > 0  # from the process start
        assert variant["target_reached"] == 1
    assert "time to val_accuracy=0.0 s" in capsys.readouterr().out

    argv[argv.index("val_accuracy=0.0")] = "val_accuracy=1.01"
    assert main(argv[:-2] + ["--out", str(tmp_path / "never")]) == 0
    assert "never reached" in capsys.readouterr().out


def test_a_metric_the_task_does_not_report_fails_the_trial(tiny, write_recipe, tmp_path):
    # what is left when the check before the trials cannot tell (a user's task): the trial fails at its first eval
    out = tmp_path / "t.json"
    argv = [
        str(write_recipe(tiny)),
        "--steps",
        "2",
        "--warmup",
        "0",
        "--json",
        str(out),
        "--target",
        "val_perplexity=3",
    ]
    assert trial_main(argv) == 1
    assert "the task reports no `val_perplexity`" in json.loads(out.read_text())["error"]


@pytest.mark.parametrize(
    "task, target, said",
    [
        (
            {},
            "val_acc=0.9",
            "the `classification` task reports no `val_acc` (did you mean `val_accuracy`?); its "
            "metrics: val_accuracy, val_loss.",
        ),
        ({"name": "regression"}, "val_accuracy=0.9", "the `regression` task reports no `val_accuracy`"),
        (
            {"name": "language_model", "accuracy": False},
            "val_accuracy=0.5",
            "its metrics: val_bits_per_token, val_loss, val_perplexity.",
        ),
    ],
)
def test_bench_refuses_a_target_metric_the_task_never_reports_before_any_trial(
    monkeypatch, tiny, write_recipe, tmp_path, capsys, task, target, said
):
    from accel.bench import runner

    monkeypatch.setattr(runner, "run_bench", lambda *args, **kwargs: pytest.fail("the trials started"))
    tiny["task"] = task or {"name": "classification"}
    out = tmp_path / "bench"
    argv = ["bench", str(write_recipe(tiny)), "--vary", "data.batch_size=8,16", "--target", target, "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --target {target}: ") and said in err and "Traceback" not in err
    assert err.count("\n") == 1 and not out.exists()


def test_a_user_task_is_not_judged_before_it_runs(tiny):
    from accel.config.recipe import validate_recipe
    from accel.tasks import reported_metrics

    user = validate_recipe({**tiny, "task": {"name": "my_pkg.tasks:Segmentation"}}).task
    assert reported_metrics(user) is None  # it may report its own metrics: only a trial can tell
    check_target_metric(Target("val_iou", 0.5), [user])


def test_tune_refuses_a_target_metric_the_task_never_reports_before_the_search(
    monkeypatch, tiny, write_recipe, tmp_path, capsys
):
    from accel.bench import tune as tune_module

    monkeypatch.setattr(tune_module, "tune", lambda *args, **kwargs: pytest.fail("the search started"))
    argv = ["tune", str(write_recipe(tiny)), "--objective", "time", "--target", "val_perplexity=3"]
    assert main([*argv, "--work", str(tmp_path / "work")]) == 2
    err = capsys.readouterr().err
    assert "the `classification` task reports no `val_perplexity`" in err and not (tmp_path / "work").exists()


@pytest.mark.slow
def test_a_trial_trains_on_samples_records_its_curve_without_its_evaluations_and_stops_at_the_target(
    tiny, write_recipe, tmp_path
):
    from accel.bench.trial import main as trial_main

    out, recipe = tmp_path / "t.json", str(write_recipe(tiny | {"data": tiny["data"] | {"batch_size": 8}}))
    # 48 samples at batch 8: 6 steps, one of them warm-up; the curve every 2 steps, with no target
    argv = [recipe, "--steps", "1", "--warmup", "1", "--samples", "48", "--eval-every", "2", "--json", str(out)]
    assert trial_main([*argv, "--curve"]) == 0
    curve = json.loads(out.read_text())
    timed = curve["steps"] + (curve.get("warmup_cut") or 0)  # a leading one-off under load counts as warm-up
    assert timed == 5 and len(curve["step_losses"]) == 6 and curve["time_to_target_s"] is None
    evals = curve["target_evals"]
    assert [e["step"] for e in evals] == [2, 4, 6] and all(e["eval_s"] > 0 for e in evals)
    assert evals[0]["eval_s"] < evals[-1]["eval_s"] and all(0 < e["wall_s"] for e in evals)
    # accuracy 0.0 is met at the first evaluation: the trial ends there
    assert trial_main([*argv, "--target", "val_accuracy=0.0", "--stop-at-target"]) == 0
    stopped = json.loads(out.read_text())
    assert [e["step"] for e in stopped["target_evals"]] == [2] and stopped["steps"] == 1
    assert stopped["time_to_target_s"] == stopped["target_evals"][0]["wall_s"]
    assert trial_main([*argv, "--stop-at-target"]) == 1
    assert "--stop-at-target needs a --target" in json.loads(out.read_text())["error"]
