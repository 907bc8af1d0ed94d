"""The profile window in real runs: a data-bound recipe is diagnosed so, `accel train --profile` writes the report
into the run directory, and outside the window the loop's phases cost nothing and leave no hooks."""

from __future__ import annotations

import contextlib
import io
import json

from accel.cli import main
from accel.runs.records import read_summary
from accel.train.run import build_trainer


def test_a_slow_loader_without_workers_is_diagnosed_data_bound_with_the_workers_advice(tiny, write_recipe, tmp_path):
    tiny["data"] = {
        "dataset": {"name": "tests.profiling.workloads:slow_samples", "args": {"delay_s": 0.05}},
        "batch_size": 8,
        "loader": {"num_workers": 0},
    }
    recipe, out = write_recipe(tiny), tmp_path / "profile"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["profile", str(recipe), "--warmup", "1", "--steps", "2", "--out", str(out)]) == 0
    report = json.loads((out / "profile.json").read_text())
    data = next(row for row in report["anatomy"]["phases"] if row["phase"] == "data")
    assert data["ms_per_step"] >= 8 * 50 * 0.9  # eight samples of 50 ms each
    (advice,) = [a for a in report["advice"] if a["rule"] == "data-bound"]
    assert "data.loader.num_workers" in advice["fix"] and "data.cache.enabled" in advice["fix"]
    assert (
        advice["bench"]
        == f"accel bench {recipe} --vary data.loader.num_workers=0,2,4 --vary data.cache.enabled=false,true"
    )
    assert (
        "waits for the next batch (loader workers: 0)" in printed.getvalue()
        and advice["bench"] in (out / "profile.md").read_text()
    )


def test_train_profile_writes_the_report_into_the_run_directory(tiny, write_recipe, tmp_path, capsys):
    tiny["data"]["batch_size"] = 8  # 8 steps an epoch, 16 in all: the window is steps 3 to 5
    run = tmp_path / "run"
    assert main(["train", str(write_recipe(tiny)), "--profile", "3", "--out", str(run)]) == 0
    report = json.loads((run / "profile" / "profile.json").read_text())
    assert report["steps"] == 3 and len(report["anatomy"]["step_ms"]) == 3
    assert report["command"].startswith("accel train ") and report["command"].endswith(f"--profile 3 --out {run}")
    assert {"profile.md", "profile.html", "anatomy.png", "trace.json.gz"} <= {
        p.name for p in (run / "profile").iterdir()
    }
    assert read_summary(run / "summary.json").status == "completed"
    assert "eval" not in {row["phase"] for row in report["anatomy"]["phases"]}  # the window ends before an epoch


def test_outside_the_window_the_phases_are_not_timed_and_no_hooks_stay(tiny, write_recipe, tmp_path):
    from accel.config.recipe import load_recipe

    trainer = build_trainer(load_recipe(str(write_recipe(tiny)), ["train.epochs=1"]))
    trainer.fit()
    assert not trainer.anatomy.active and trainer.anatomy.segments == []
    assert trainer.anatomy.phase("forward").__class__.__name__ == "nullcontext"
    trainer.anatomy.start(trainer.model, trainer.module)
    assert trainer.model._forward_hooks and any(child._forward_pre_hooks for child in trainer.module.children())
    trainer.anatomy.stop()
    assert not trainer.model._forward_hooks and not any(m._forward_pre_hooks for m in trainer.module.modules())
