"""The run's own records are typed (accel.runs.records): a misspelt field fails where a record is written and where
it is read, what the current code writes reads back equal, and an older summary.json reads with defaults."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from accel.config.recipe import load_recipe
from accel.runs.records import (
    EpochRecord,
    EvalRecord,
    FitSummary,
    LoopRecord,
    StepRecord,
    parse_record,
    read_metrics,
    read_summary,
)
from accel.runs.rundir import RunDir
from accel.train.run import run_recipe

# DESIGN.md's summary.json, as the first accel wrote it: every field added since is missing
OLDEST_SUMMARY = {
    "status": "completed",
    "metrics": {"val_accuracy": 0.9, "val_loss": 0.3, "train_loss": 0.25},
    "samples_per_s": 1200.0,
    "wall_s": 12.5,
    "steps": 40,
    "epochs": 2,
    "device": "cpu",
}
STEP = {"epoch": 1, "step": 20, "lr": 0.01, "loss": 1.5, "samples_per_s": 300.0, "data_wait_fraction": 0.1}


def test_a_misspelt_field_fails_where_a_record_is_built():
    with pytest.raises(ValidationError, match="stauts"):
        FitSummary(**OLDEST_SUMMARY, stauts="completed")
    with pytest.raises(ValidationError, match="tokens_per_sec"):
        StepRecord(**STEP, tokens_per_sec=10.0)
    with pytest.raises(ValidationError, match="val_loss"):  # the task's metrics go in `metrics`, not beside
        EvalRecord(epoch=1, step=20, val_loss=0.3)
    summary = FitSummary(**OLDEST_SUMMARY)
    with pytest.raises(ValueError, match="diverged_at"):
        summary.diverged_at = 3
    with pytest.raises(AttributeError, match="wall_seconds"):
        summary.wall_seconds  # noqa: B018


def test_a_misspelt_field_fails_where_a_record_is_read(tmp_path, caplog):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(OLDEST_SUMMARY | {"stpes": 40}))
    assert read_summary(path) is None
    assert f"{path} is unreadable or not a run summary" in caplog.text and "stpes" in caplog.text
    metrics = tmp_path / "metrics.jsonl"
    written = {"kind": "step", **STEP}
    metrics.write_text(json.dumps(written) + "\n" + json.dumps(written | {"stpe": written.pop("step")}) + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl, line 2: .*\nstep\n  Field required"):
        read_metrics(metrics)
    with pytest.raises(ValidationError, match="kind"):  # a step line has no open-ended names to take a stray one
        parse_record(json.dumps({"kind": "step", **STEP, "kind_of": "x"}))


def test_an_older_summary_without_the_later_fields_reads_with_defaults(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(OLDEST_SUMMARY))
    summary = RunDir(tmp_path, create=False).read_summary()
    assert summary.status == "completed" and summary.epochs == 2 and summary.metrics["val_accuracy"] == 0.9
    assert summary.diverged_at_step is None and summary.speedups == [] and summary.lint == []
    assert json.loads(summary.to_json()) == OLDEST_SUMMARY  # written back, it gains no field it did not have


def test_a_run_reads_back_equal_to_what_it_wrote_in_the_same_shape(tiny, write_recipe, tmp_path):
    tiny["log"]["every_steps"] = 1
    out = tmp_path / "run"
    returned = run_recipe(load_recipe(str(write_recipe(tiny))), out=out)
    text = (out / "summary.json").read_text()
    assert returned == json.loads(text)  # what Python callers get (README) is the file's fields
    summary = RunDir(out, create=False).read_summary()
    assert summary.to_json(indent=2) + "\n" == text
    assert FitSummary.model_validate_json(summary.to_json()) == summary
    assert summary.status == "completed" and summary.run_dir == str(out) and summary.epochs == 2
    assert {"val_accuracy", "val_loss", "train_loss"} <= set(json.loads(text)["metrics"])

    lines = (out / "metrics.jsonl").read_text().splitlines()
    records = read_metrics(out / "metrics.jsonl")
    assert [record.to_json() for record in records] == lines
    assert {type(record) for record in records} == {StepRecord, EpochRecord}
    epoch = records[-1]
    assert isinstance(epoch, EpochRecord) and epoch.epoch == 2 and "val_accuracy" in epoch.metrics
    # the task's metrics stay flat in the file, beside the record's fields, as users' scripts read them
    assert "val_accuracy" in json.loads(lines[-1]) and "metrics" not in json.loads(lines[-1])


def test_open_ended_names_are_written_flat_and_read_back_into_their_mappings():
    epoch = EpochRecord(
        **{k: v for k, v in STEP.items() if k != "loss"},
        train_loss=1.5,
        metrics={"val_loss": 0.5, "val_perplexity": 1.65},
        parts={"compile": {"recompiles": 2}},
    )
    line = epoch.to_json()
    assert json.loads(line) == {
        "kind": "epoch",
        **{k: v for k, v in STEP.items() if k != "loss"},
        "train_loss": 1.5,
        "val_loss": 0.5,
        "val_perplexity": 1.65,
        "compile/recompiles": 2,
    }
    assert parse_record(line) == epoch and parse_record(line).named("compile/recompiles") == 2
    own = LoopRecord.from_flat({"step": 3, "loss": 0.5, "note": "warm"})  # a script's `eng.log`: no kind
    assert json.loads(own.to_json()) == {"step": 3, "loss": 0.5, "note": "warm"} and parse_record(own.to_json()) == own


def test_a_non_finite_figure_is_written_as_null():
    record = StepRecord(**STEP | {"loss": math.nan})
    assert json.loads(record.to_json())["loss"] is None
    summary = FitSummary(**OLDEST_SUMMARY | {"metrics": {"train_loss": math.inf}})
    assert json.loads(summary.to_json())["metrics"] == {"train_loss": None}
    assert math.isnan(record.loss)  # in memory it stays what the run measured
