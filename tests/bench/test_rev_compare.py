"""The pure parts of comparing revisions: the sentence, `--fail-if-slower`'s gate, the change-point test and the
history file's reader (the measured ones: tests/bench/test_revisions.py)."""

from __future__ import annotations

import pytest

from accel.bench.change_points import change_points
from accel.bench.history import HistoryEntry, read
from accel.bench.history_report import series, table
from accel.bench.records import Reading, RevisionReading, Verdict
from accel.bench.rev_compare import Judged, gate, judge, parse_share, sentence
from accel.errors import AccelError


def _reading(median, lo, hi, verdict=Verdict.NO_EFFECT, busy=None, undecided=None) -> RevisionReading:
    marks = ({"busy": busy} if busy else {}) | ({"undecided": undecided, "trials_needed": 40} if undecided else {})
    ratio = Reading(median=median, ci95=(lo, hi), verdict=verdict, **marks)
    return RevisionReading(
        variant="b", against="a", ratio=ratio, result_changed=False, said=sentence("b", "a", ratio, False)
    )


def test_the_sentence_says_by_how_much_with_its_interval():
    assert (
        _reading(0.93, 0.90, 0.96, Verdict.HURT).said == "b is 7.0% slower than a [4.0%, 10.0%] (0.93x the samples/s)"
    )
    assert _reading(1.5, 1.2, 1.8, Verdict.HELPED).said == "b is 50% faster than a [20%, 80%] (1.50x the samples/s)"
    said = "no measurable difference between b and a: 0.99x [0.95, 1.03] the samples/s"
    assert _reading(0.99, 0.95, 1.03).said == said
    busy = _reading(0.8, 0.7, 0.9, None, busy=0.6).said
    assert busy.endswith("no verdict: busy machine (others took 60% of the cores)")
    wide = _reading(0.97, 0.90, 1.04, None, undecided=0.03).said
    assert wide.endswith(
        "no verdict: cannot tell at +-3%: the interval is wider than that; about 40 trials a side would tell"
    )


@pytest.mark.parametrize(
    "reading, code, said",
    [
        (_reading(0.90, 0.85, 0.95, Verdict.HURT), 1, "FAIL: b is slower than a by more than 3.0%"),
        (_reading(0.99, 0.975, 1.01), 0, "ok: b is not slower than a by more than 3.0%"),
        # across the line: neither passed nor failed, with its own exit code and what would tell
        (_reading(0.97, 0.90, 1.02, None, undecided=0.03), 4, "CANNOT TELL: whether b is slower than a by more"),
        (_reading(0.80, 0.75, 0.85, None, busy=0.5), 4, "CANNOT TELL"),  # busy: no verdict, no failure
        # too wide for the two-sided verdict at 3%, yet wholly above the gate's line: not slower
        (_reading(1.01, 0.98, 1.05, None, undecided=0.03), 0, "ok: b is not slower than a by more than 3.0%"),
    ],
)
def test_the_gate_fails_only_when_the_interval_says_slower_by_more_than_allowed(reading, code, said):
    got, lines = gate([reading], 0.03)
    assert got == code and lines[0].startswith(said)


def test_a_gate_that_cannot_tell_says_how_many_trials_would():
    _, lines = gate([_reading(0.97, 0.90, 1.02, None, undecided=0.03)], 0.03)
    assert "About 40 trials a side would tell on this noise (--trials 40)." in lines[0]


def test_a_revision_that_did_not_train_fails_the_gate():
    failed = RevisionReading(variant="b", against="a", ratio=Reading(), result_changed=None, said="b failed")
    assert judge(failed.ratio, 0.03) == Judged.FAILED and gate([failed], 0.03)[0] == 1


@pytest.mark.parametrize("text, share", [("3%", 0.03), ("5", 0.05), ("0%", 0.0)])
def test_a_share_reads_as_a_percentage(text, share):
    assert parse_share(text) == pytest.approx(share)


@pytest.mark.parametrize("text", ["-3%", "100%", "fast"])
def test_a_share_out_of_range_is_refused(text):
    with pytest.raises(AccelError, match="give a percentage"):
        parse_share(text)


def test_a_step_in_a_noisy_series_is_marked_where_it_starts():
    noisy = [100, 103, 98, 101, 99, 102, 70, 72, 69, 71, 70]
    steps = change_points(noisy)
    assert list(steps) == [6] and steps[6] == pytest.approx(-0.30, abs=0.02)


def test_noise_and_small_steps_are_not_marked():
    assert change_points([100, 108, 93, 104, 96, 107, 95, 102]) == {}  # noise of +-8%, no level change
    assert change_points([100, 100, 100, 97, 97, 97]) == {}  # a steady 3% step: below the 5% floor


def test_a_short_series_steps_by_its_benches_own_intervals():
    assert list(change_points([100, 101, 50, 49], half_widths=[0.03] * 4)) == [2]
    assert change_points([100, 101, 90, 89], half_widths=[0.2] * 4) == {}  # each bench itself +-20%: cannot tell


def test_a_line_that_is_not_a_history_entry_is_an_error_naming_it(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text('{"commit": "x"}\n')
    with pytest.raises(AccelError, match="h.jsonl:1 is not a line `accel bench --history` writes"):
        read(path)


def _entry(short: str, sps: float, date: int, **marks) -> HistoryEntry:
    return HistoryEntry(
        commit=short * 5,
        short=short,
        subject=f"commit {short}",
        commit_date=f"2026-01-{date:02d}",
        measured="2026-02-01",
        machine="m1",
        fingerprint={"device": "cpu", "torch": "2.14", "threads": 2},
        variant=short,
        samples_per_s=sps,
        ci95=(sps * 0.97, sps * 1.03),
        trials=3,
        **marks,
    )


def test_a_busy_reading_is_marked_and_kept_out_of_the_step_search():
    """The newcomer's case: a busy spell made the slow commit read as the fastest. Its reading is shown, marked,
    and the search for steps reads the quiet ones only; a reading whose comparison decided nothing is marked."""
    found = [_entry("a", 100, 1), _entry("b", 101, 2), _entry("c", 70, 3), _entry("d", 71, 4)]
    found += [_entry("e", 400, 5, busy=0.6), _entry("f", 70.5, 6, against="a", undecided=True)]
    (s,) = series(found)
    assert list(s.steps) == [2]  # the quiet drop at c, nothing at the busy e
    _, rows = table(s)
    marks = {row[0]: row[-1] for row in rows}
    assert marks["e"] == "busy (others took 60%): not in the step search"
    assert marks["f"] == "undecided against a" and marks["a"] == ""
    # a quiet reading of the same commit is what its point says
    (s,) = series([*found, _entry("e", 69, 5)])
    assert s.points[4].samples_per_s == 69 and s.points[4].mark == ""
