"""accel.io: atomic writes leave the old file or the new one, never a part; strict JSON has no NaN."""

from __future__ import annotations

import errno
import json
import math
import re

import pytest

from accel import io
from accel.errors import AccelError


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("old")
    assert io.write_atomic(target, "new") == target
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_a_written_file_is_readable_as_one_open_would_make_it(tmp_path):
    io.write_atomic(tmp_path / "summary.json", "{}")
    (tmp_path / "plain.json").write_text("{}")
    mode = (tmp_path / "summary.json").stat().st_mode & 0o777
    assert mode == (tmp_path / "plain.json").stat().st_mode & 0o777 and mode & 0o044  # others may read the run


def test_a_failed_write_keeps_the_old_file_and_removes_the_partial_one(tmp_path):
    target = tmp_path / "last.pt"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), io.atomic_file(target) as handle:
        handle.write(b"half of the new")
        raise KeyboardInterrupt  # Ctrl-C mid-write
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_a_full_disk_is_said_with_what_was_kept(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "env.json"
    monkeypatch.setattr(io.os, "fsync", full)
    with pytest.raises(AccelError, match=r"Disk full: could not write .*env.json \(2 bytes\); nothing was written"):
        io.write_atomic(target, "{}")
    assert list(tmp_path.iterdir()) == []


def test_strict_json_writes_null_for_non_finite_numbers_at_any_depth():
    text = io.strict_json({"loss": math.nan, "rates": [math.inf, 1.0], "best": (-math.inf, {"x": 2.5})})
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"loss": None, "rates": [None, 1.0], "best": [None, {"x": 2.5}]}


def test_strict_json_writes_other_objects_and_keys_as_text():
    assert json.loads(io.strict_json({("a", 1): io.RUNS, 3: True})) == {"('a', 1)": "runs", "3": True}


def test_default_out_is_a_timestamped_folder_under_runs():
    assert re.fullmatch(r"runs/quickstart-\d{8}-\d{6}", str(io.default_out("quickstart")))
    assert re.fullmatch(r"runs/tune-quickstart-\d{8}-\d{6}", str(io.default_out("quickstart", kind="tune")))


def test_an_output_folder_that_cannot_be_made_is_refused(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    with pytest.raises(AccelError, match=r"--work .*: .*file is a file, not a folder, so nothing can be written"):
        io.check_creatable(tmp_path / "file" / "a" / "b", "--work")
    io.check_creatable(tmp_path / "new" / "deeper")  # a folder that can be made is fine, and nothing is made
    assert not (tmp_path / "new").exists()
    # root may write anywhere, so a folder this user may not write is simulated
    monkeypatch.setattr("accel.io.os.access", lambda path, mode: False)
    with pytest.raises(AccelError, match=f"this user may not write in {tmp_path}. Choose another --out"):
        io.check_creatable(tmp_path / "new")
