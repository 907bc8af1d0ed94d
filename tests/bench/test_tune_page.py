"""tune.html (accel/bench/tune/page.py): each knob's importance read from the search's own measurements, and the
search's history; on a simulated search, a learning-rate ladder's rungs chained."""

from __future__ import annotations

import math
import re

import pytest

from accel.bench.knobs import LR_KEY
from accel.bench.records import Interval, Reading
from accel.bench.tune import TuneResult
from accel.bench.tune.page import NEVER, effects, importance_table, write_page
from accel.bench.tune.rows import TuneRow
from tests.bench.test_tune_time import ladder_search, lm_base  # noqa: F401 (a fixture)


def row(knob: str, label: str, time_ratio: float | None, reached: int = 3) -> TuneRow:
    ratio = Reading(median=time_ratio, ci95=(time_ratio, time_ratio)) if time_ratio is not None else None
    return TuneRow(
        knob=knob,
        value=label,
        label=label,
        samples_per_s=Interval(median=100.0),
        ratio=Interval(median=1.0),
        verdict=None,
        note="",
        time_to_target_s=10.0 * (time_ratio or 1) if reached else None,
        time_ratio=ratio,
        target_reached=reached,
    )


def test_knobs_rank_by_the_spread_of_their_values_and_one_that_never_got_there_ranks_first():
    result = TuneResult(target="val_loss<=2", objective="time")
    result.rows = [
        row("optim.name", "adamw", 1.0),
        row("optim.name", "muon", 0.95),
        row("optim.lr", "0.001", 1.0),
        row("optim.lr", "0.002", 0.7),
        row("optim.lr", "0.004", 1.2),
        row("data.batch_size", "32", 1.0),
        row("data.batch_size", "16", None, reached=0),
        row("data.batch_size", "64", 0.9),
        row("speedups.amp", "off", None, reached=None),  # a speed-up row, by samples/s: half the samples/s
        row("speedups.amp", "bf16", None, reached=None),
    ]
    result.rows[-1].ratio = Interval(median=0.5)
    result.levers = [("optim.lr=0.002", Reading(median=0.7)), ("data.batch_size=64", Reading(median=0.9))]
    result.chosen = {"optim.name": "adamw", "optim.lr": "0.002", "data.batch_size": "64", "speedups.amp": "off"}
    found = effects(result)
    assert [e.knob for e in found] == ["data.batch_size", "speedups.amp", "optim.lr", "optim.name"]
    by = {e.knob: e for e in found}
    assert by["data.batch_size"].never == ("16",) and math.isinf(by["data.batch_size"].spread)
    assert by["speedups.amp"].ratios["bf16"] == pytest.approx(2.0)  # twice the time per sample
    assert by["optim.lr"].spread == pytest.approx(1.2 / 0.7) and by["optim.lr"].bought == pytest.approx(0.7)
    assert by["optim.name"].bought == 1.0 and by["speedups.amp"].bought == 1.0  # kept as given: nothing bought
    header, rows = importance_table(found)
    assert rows[0] == ["data.batch_size", "64 (0.90x)", f"16 ({NEVER})", "inf", "0.90x"]
    assert rows[2] == ["optim.lr", "0.002 (0.70x)", "0.004 (1.20x)", "1.71", "0.70x"]


def test_a_searchs_page_chains_a_ladders_rungs_and_shows_its_history(lm_base, tmp_path):  # noqa: F811
    result = ladder_search(lm_base, tmp_path, [])
    # each rung is its own lever (tune.json's shares kept only the last when both were named optim.lr)
    assert [name for name, _ in result.levers] == [f"{LR_KEY}=0.001", f"{LR_KEY}=0.002"]
    (lr,) = effects(result)
    assert lr.bought == pytest.approx(math.prod(r.median for _, r in result.levers)) and lr.bought < 0.9
    assert lr.ratios["0.002"] == pytest.approx(lr.bought)  # its rung's ratio carried through 0.001's
    assert lr.ratios["0.0005"] == 1.0 and lr.never == ("0.00025",)
    page = write_page(result, tmp_path, ["chosen: optim.lr=0.002"]).read_text()
    assert page.count("data:image/png;base64,") == 2  # the importance plot and the history, inside the page
    assert re.search(rf"<td>{LR_KEY}</td><td>0\.002 \({lr.bought:.2f}x\)</td><td>0\.00025 \({NEVER}\)</td>", page)
    assert "chosen: optim.lr=0.002" in page


def test_a_page_with_nothing_measured_says_so(tmp_path):
    page = write_page(TuneResult(), tmp_path, []).read_text()
    assert "No knob had two values measured." in page and "No trial ran." in page
