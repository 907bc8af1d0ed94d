"""The history file itself: checked before the first trial, appended whole, read from any bytes (its figures and
the page: tests/bench/test_rev_compare.py, tests/bench/test_revisions.py)."""

from __future__ import annotations

import json
import logging
import os

import pytest

from accel.bench import history
from accel.bench.history import HistoryEntry, read
from accel.cli import main

LINE = {
    "commit": "3f2a1bc" * 5,
    "short": "3f2a1bc",
    "subject": "a commit",
    "commit_date": "2026-01-01",
    "measured": "2026-02-01",
    "machine": "m1",
    "fingerprint": {"device": "cpu", "torch": "2.14", "threads": 2},
    "variant": "3f2a1bc",
    "samples_per_s": 100.0,
    "ci95": [97.0, 103.0],
    "trials": 3,
}


def _line(**changed) -> str:
    return json.dumps(LINE | changed)


def _one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_a_line_is_never_glued_onto_one_a_killed_writer_left_cut(tmp_path, caplog):
    path = tmp_path / "h.jsonl"
    path.write_text(_line() + "\n" + _line(short="b")[:40])  # a bench killed while it wrote its line
    assert history.append(path, [HistoryEntry.model_validate_json(_line(short="c"))]) is True
    lines = path.read_text().splitlines()
    assert lines[1] == _line(short="b")[:40] and json.loads(lines[2])["short"] == "c"
    with caplog.at_level(logging.WARNING, logger="accel"):
        assert [e.short for e in read(path)] == ["3f2a1bc", "c"]
    assert f"{path}:2 was cut (a writer killed midway): left out" in caplog.messages


def test_the_lines_are_written_in_one_write_flushed_to_disk(tmp_path, monkeypatch):
    writes, synced = [], []
    write, fsync = os.write, os.fsync
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(data) or write(fd, data))
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or fsync(fd))
    path = tmp_path / "h.jsonl"
    entries = [HistoryEntry.model_validate_json(_line(short=name)) for name in "ab"]
    assert history.append(path, entries) is False
    assert len(writes) == 1 and writes[0].count(b"\n") == 2 and writes[0].endswith(b"\n") and synced
    assert [e.short for e in read(path)] == ["a", "b"]


def test_a_cut_last_line_is_said_before_the_first_trial(tmp_path, caplog):
    from accel.bench.history import check_appendable

    path = tmp_path / "h.jsonl"
    path.write_text(_line() + "\n" + _line()[:30])
    with caplog.at_level(logging.WARNING, logger="accel"):
        check_appendable(path)
    assert any(m.startswith(f"{path}:2, its last line, was cut") for m in caplog.messages), caplog.messages


@pytest.mark.parametrize(
    "case, said",
    [
        ("a folder", "is a folder; accel writes a file there"),
        ("not a history", "h.jsonl:1 is not a line `accel bench --history` writes"),
        ("under a file", "is a file, not a folder"),
    ],
)
def test_a_history_no_line_could_be_appended_to_is_refused_before_any_trial(
    tiny, write_recipe, tmp_path, capsys, monkeypatch, case, said
):
    def trials(*args, **kwargs):
        raise AssertionError("a trial ran")

    monkeypatch.setattr("accel.bench.rev_plan.bench_revisions", trials)
    given = {"a folder": tmp_path / "h", "not a history": tmp_path / "h.jsonl", "under a file": tmp_path / "f" / "h"}
    (tmp_path / "h").mkdir()
    (tmp_path / "h.jsonl").write_text("commit,samples_per_s\n")
    (tmp_path / "f").write_text("a file\n")
    argv = ["bench", str(write_recipe(tiny)), "--out", str(tmp_path / "b"), "--history", str(given[case])]
    assert said in _one_line_error(capsys, argv)
    assert not (tmp_path / "b").exists()


def test_history_of_bytes_that_are_not_utf8_is_one_line_naming_it(tmp_path, capsys):
    path = tmp_path / "h.jsonl"
    path.write_bytes(_line().encode() + b"\n\xff\xfe\x00binary\n")
    assert "h.jsonl:2 is not a line `accel bench --history` writes: not UTF-8 text" in _one_line_error(
        capsys, ["history", str(path)]
    )


PAGES = {
    # `$\frac$` in a --vary value or a revision's name was parsed as mathtext
    "mathtext": [_line(vary=r"$\frac$", short=r"$\frac{a")],
    # a negative figure, its interval not around it: the error bars were negative
    "below zero": [_line(), _line(short="b", commit_date="2026-01-02", samples_per_s=-5.0, ci95=[1.0, 2.0])],
    "zero, not finite": [_line(), _line(short="b", commit_date="2026-01-02", samples_per_s=0.0, ci95=[5.0, 1.0])]
    + [_line(short="c", commit_date="2026-01-03").replace("100.0", "NaN").replace("97.0", "Infinity")],
}


@pytest.mark.parametrize("case", PAGES)
def test_a_page_draws_the_historys_text_as_it_is_and_every_figure(tmp_path, capsys, case):
    """Each case was a matplotlib traceback."""
    path, page = tmp_path / "h.jsonl", tmp_path / "h.html"
    path.write_text("\n".join(PAGES[case]) + "\n")
    assert main(["history", str(path), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "data:image/png;base64," in page.read_text()
    if case == "mathtext":
        assert r"$\frac{a" in out and r"$\frac{a" in page.read_text()
    else:
        assert "no speed (0 or below): not in the step search" in out


def test_history_refuses_a_page_onto_a_folder_before_reading(tmp_path, capsys):
    path, folder = tmp_path / "h.jsonl", tmp_path / "pages"
    path.write_text(_line() + "\n")
    folder.mkdir()
    assert "--html" in _one_line_error(capsys, ["history", str(path), "--html", str(folder)])
