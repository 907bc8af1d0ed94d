"""A run directory in the cases issue 39 found: a checkpoint of another model of the same size, a summary.json that
cannot be replaced, and a run that failed before its first checkpoint (neither resumable nor reusable as it was)."""

from __future__ import annotations

import errno
import json
import os
import shlex
from pathlib import Path

import pytest
from torch import nn

from accel.cli import main
from accel.errors import CheckpointError
from accel.runs.checkpoint import check_same_model, model_signature
from accel.runs.records import read_summary


def _fails_cleanly(capsys, *argv) -> str:
    """Exit code 2 and one message, without a traceback (after the epochs' lines, for a run that trained)."""
    assert main([str(arg) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and "Traceback" not in err
    return err[err.index("error: ") :]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_checkpoint_of_a_model_with_the_same_class_and_counts_but_other_shapes_is_refused():
    saved = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 2))  # 17 parameters, 4 keys
    other = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 3))  # 17 parameters, 4 keys
    with pytest.raises(CheckpointError, match=r"its `0.weight` is \[3, 2\], here \[2, 3\]"):
        check_same_model(model_signature(saved), other, "last.pt")
    renamed = {**model_signature(saved), "shapes": {"a.weight": [3, 2]}}
    with pytest.raises(CheckpointError, match="its `a.weight` is not in this model"):
        check_same_model(renamed, saved, "last.pt")
    check_same_model(model_signature(saved), nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 2)), "last.pt")


def test_an_older_checkpoints_signature_without_shapes_still_resumes():
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 2))
    older = {key: value for key, value in model_signature(model).items() if key != "shapes"}
    check_same_model(older, model, "last.pt")


MODELS = """from torch import nn


def plain(num_classes=4, **_):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 2), nn.Linear(2, num_classes))


def shifted(num_classes=4, **_):  # the same class, parameter count (142) and key count (4), other names
    return nn.Sequential(nn.Flatten(), nn.Identity(), nn.Linear(64, 2), nn.Linear(2, num_classes))
"""


def test_resuming_with_another_model_of_the_same_size_is_refused_and_changes_nothing(
    capsys, tiny, write_recipe, tmp_path, monkeypatch
):
    (tmp_path / "two_models.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "run"
    tiny["model"] = {"name": "two_models:plain"}
    assert main(["train", str(write_recipe(tiny)), "--out", str(out), "--set", "train.epochs=1"]) == 0
    capsys.readouterr()
    before = _files(out)
    tiny["model"] = {"name": "two_models:shifted"}
    err = _fails_cleanly(capsys, "train", write_recipe(tiny), "--out", out, "--resume")
    assert "written for a different model (Sequential, 142 parameters; its `1.weight` is not in this model)" in err
    assert _files(out) == before


def test_a_summary_that_cannot_be_replaced_is_an_error_holding_the_summary(
    capsys, tiny, write_recipe, tmp_path, monkeypatch
):
    out, recipe = tmp_path / "run", write_recipe(tiny)
    assert main(["train", str(recipe), "--out", str(out), "--set", "train.epochs=1"]) == 0
    capsys.readouterr()
    earlier = (out / "summary.json").read_text()
    replace = os.replace

    def refuse_summary(src, dst):  # root may replace any file: an immutable summary.json is simulated
        if Path(dst).name == "summary.json":
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
        replace(src, dst)

    monkeypatch.setattr("accel.io.os.replace", refuse_summary)
    err = _fails_cleanly(capsys, "train", recipe, "--out", out, "--resume", "--set", "train.epochs=2")
    assert (
        f"the run ended (completed), but {out / 'summary.json'} could not be written (Operation not permitted)" in err
    )
    assert "it still holds an earlier summary (status 'completed'), which is now out of date" in err
    shown = json.loads(err[err.index("{") :])
    assert shown["status"] == "completed" and shown["epochs"] == 2
    assert (out / "summary.json").read_text() == earlier
    assert not list(out.glob(".summary.json.*.tmp"))


FAILING_TASK = """def loss(model, batch):
    raise ValueError("the user's loss failed")
"""


def test_a_run_that_failed_before_its_first_checkpoint_says_how_to_start_over(
    capsys, tiny, write_recipe, tmp_path, monkeypatch
):
    (tmp_path / "failing_task.py").write_text(FAILING_TASK)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    tiny["task"] = {"name": "failing_task:loss"}
    out, recipe = tmp_path / "run", write_recipe(tiny)
    with pytest.raises(ValueError, match="the user's loss failed"):  # the user's bug: its own traceback
        main(["train", str(recipe), "--out", str(out)])
    capsys.readouterr()
    assert read_summary(out / "summary.json").status == "failed"
    before = _files(out)
    start_over = f"to start it over there, remove the folder first (`rm -r {shlex.quote(str(out))}`"
    again = _fails_cleanly(capsys, "train", recipe, "--out", out)
    assert f"{out} already holds a run (failed)" in again and "no checkpoint, so it cannot be resumed" in again
    assert start_over in again
    resumed = _fails_cleanly(capsys, "train", recipe, "--out", out, "--resume")
    assert f"--resume: {out} holds a run (failed) that stopped before its first checkpoint" in resumed
    assert start_over in resumed
    assert _files(out) == before


def test_the_signature_names_every_entry_with_its_shape():
    signature = model_signature(nn.BatchNorm1d(3))
    assert signature["shapes"] == {
        "weight": [3],
        "bias": [3],
        "running_mean": [3],
        "running_var": [3],
        "num_batches_tracked": [],
    }
    assert signature["keys"] == 5
