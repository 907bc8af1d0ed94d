"""What a run says as it goes and at its end (issue 39): step lines on a pipe before the first epoch ends, and the
share of an epoch a step budget stopped in, not 0."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from accel.callbacks import progress
from accel.callbacks.progress import LINE_EVERY_S, ProgressBar
from accel.cli import main
from accel.runs.records import StepRecord, read_summary
from conftest import run_cli


def test_a_step_budget_that_ends_inside_the_first_epoch_reports_the_share_of_it(tiny, write_recipe, tmp_path):
    out = tmp_path / "run"  # 64 samples less the validation share, batches of 16, the last dropped: 3 an epoch
    assert main(["train", str(write_recipe(tiny)), "--out", str(out), "--set", "train.max_steps=2"]) == 0
    summary = read_summary(out / "summary.json")
    assert summary.status == "completed" and summary.steps == 2 and summary.epochs == 0.667
    assert main(["train", str(write_recipe(tiny)), "--out", str(tmp_path / "whole")]) == 0
    assert read_summary(tmp_path / "whole" / "summary.json").epochs == 2  # whole: an int


def test_off_a_terminal_the_first_step_line_comes_at_once_and_then_at_most_one_per_interval(monkeypatch):
    text, quiet = io.StringIO(), io.StringIO()
    bar = ProgressBar(Console(file=text, force_terminal=False), bar=True)  # before the clock is replaced
    without = ProgressBar(Console(file=quiet, force_terminal=False), bar=False)
    clock = iter([100.0, 101.0, 100.0 + LINE_EVERY_S + 1])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    figures = {"epoch": 1, "lr": 0.1, "loss": 1.5, "samples_per_s": 300.0, "data_wait_fraction": 0.0}
    for step in (2, 4, 6):
        bar.on_log(None, StepRecord(step=step, **figures))
    assert text.getvalue().splitlines() == [
        "step 2  epoch 1  loss 1.5000  300 samples/s",
        "step 6  epoch 1  loss 1.5000  300 samples/s",
    ]
    without.on_log(None, StepRecord(step=2, **figures))
    assert quiet.getvalue() == ""  # log.progress: false keeps only the epoch lines


@pytest.mark.slow
def test_accel_train_on_a_pipe_shows_steps_before_its_first_epoch_ends(tiny, write_recipe):
    tiny["train"]["epochs"] = 1
    done = run_cli(
        "train", write_recipe(tiny), "--out", write_recipe(tiny).parent / "run", "--set", "log.progress=true"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    first_step = next(i for i, line in enumerate(lines) if line.startswith("step 2  epoch 1  loss "))
    assert first_step < next(i for i, line in enumerate(lines) if line.startswith("epoch 1  train_loss"))
