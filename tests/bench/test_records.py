"""The typed bench records read and write the files the untyped dicts wrote, key for key.

tests/bench/data holds files written by `accel bench` before the records were typed (a tiny --ablate run, and a
--vary run with a --target and a variant whose trials all failed), so these tests hold today's code to them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from accel.bench.records import Report, Trial, Verdict
from accel.bench.report import render_markdown, summary_text, write_reports

DATA = Path(__file__).parent / "data"
REPORTS = ["ablation-report", "vary-target-report"]


def _report(name: str) -> tuple[dict, Report]:
    text = (DATA / f"{name}.json").read_text()
    return json.loads(text), Report.model_validate_json(text)


@pytest.mark.parametrize("name", REPORTS)
def test_a_stored_report_reads_and_writes_back_the_same_json(name, tmp_path):
    stored, report = _report(name)
    assert report.to_data() == stored  # same keys, same values, at every level
    write_reports(report, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text()) == stored


@pytest.mark.parametrize("name", REPORTS)
def test_a_stored_report_renders_the_same_markdown_and_summary(name):
    stored_md = (DATA / f"{name}.md").read_text()
    _, report = _report(name)
    assert render_markdown(report) == stored_md
    # what `accel bench` printed: report.md from the interruption note or the table on
    lines = stored_md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(("**Interrupted**", "| variant")))
    assert summary_text(report) == "\n".join(lines[start:])


def test_verdicts_are_typed_where_read_and_plain_strings_in_the_file():
    stored, report = _report("ablation-report")
    assert report.speedups["amp"].verdict == Verdict.MIXED and stored["speedups"]["amp"]["verdict"] == "mixed"
    assert {v.verdict for v in report.variants} <= set(Verdict) | {None}


@pytest.mark.parametrize("name", ["trial.json", "failed-trial.json"])
def test_a_trial_record_on_disk_keeps_its_keys(name):
    text = (DATA / name).read_text()
    trial = Trial.model_validate_json(text)
    assert json.loads(trial.to_json()) == json.loads(text)


def test_a_trial_keeps_nan_in_its_own_file_as_strict_json_and_writes_null_in_a_report():
    evals = [{"step": 2, "wall_s": 1.5, "value": float("nan")}]
    trial = Trial(variant="v", trial=0, error="NaN", samples_per_s=1.0, final_loss=float("nan"), target_evals=evals)
    trial = trial.updated(step_times_s=[0.1, float("inf")], load={"low": float("-inf")})
    text = trial.to_json()

    def refuse(constant):
        raise AssertionError(f"the trial's file holds a bare {constant}")

    assert json.loads(text, parse_constant=refuse)["final_loss"] == "NaN"  # every JSON parser reads it
    read = Trial.model_validate_json(text)  # and the runner reads a diverged loss as diverged, not as missing
    assert math.isnan(read.final_loss) and math.isnan(read.target_evals[0]["value"])
    assert read.step_times_s == [0.1, math.inf] and read.load == {"low": -math.inf} and read.error == "NaN"
    assert trial.to_data()["final_loss"] is None  # a report's JSON: null
    assert set(Trial(error="boom").to_data()) == {"error"}  # a record writes only what it was given


def test_a_misspelt_field_is_an_error():
    with pytest.raises(ValueError, match="samples_per_sec"):
        Trial(samples_per_sec=1.0)


def test_a_window_by_time_is_said_in_the_settings_and_under_the_environment():
    stored, report = _report("ablation-report")
    assert "window_s" not in stored["settings"]  # a bench by count alone says nothing new
    report.settings = report.settings.model_copy(update={"window_s": 1.0})
    assert report.to_data()["settings"]["window_s"] == 1.0
    said = render_markdown(report).split("Baseline:")[0]
    assert "Timed window: at least 3 steps and 1 s of steps per trial, after 1 warm-up steps" in said
