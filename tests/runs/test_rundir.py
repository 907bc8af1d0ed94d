"""What a run directory guarantees: never overwritten, never changed by a refused command, strict JSON, a diverged
run said so, a resume command that works as printed, damaged checkpoints named, no stale temporary files."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import signal
import subprocess
import sys

import pytest
import torch

from accel.cli import main
from accel.errors import DataError, user_message
from conftest import ROOT, finish, run_cli, wait_for_first_checkpoint


def snapshot(folder) -> dict[str, str]:
    """Every file under `folder` and a hash of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def refused(capsys, *argv: str) -> str:
    """Exit code 2, one message, no traceback."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def strict(text: str):
    def no_constants(name):
        raise AssertionError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=no_constants)


@pytest.fixture
def finished(tiny, write_recipe, tmp_path, capsys):
    """A finished two-epoch run: (recipe path, run directory)."""
    recipe, out = write_recipe(tiny), tmp_path / "run"
    assert main(["train", str(recipe), "--out", str(out)]) == 0
    capsys.readouterr()
    return recipe, out


def test_a_finished_run_is_never_overwritten(finished, capsys):
    recipe, out = finished
    before = snapshot(out)
    err = refused(capsys, "train", str(recipe), "--set", "train.epochs=1", "--out", str(out))
    assert f"{out} already holds a run (completed)" in err and "--resume" in err and "another folder" in err
    assert snapshot(out) == before


def test_a_resume_of_a_completed_run_changes_nothing_and_says_what_to_do(finished, capsys):
    recipe, out = finished
    before = snapshot(out)
    err = refused(capsys, "train", str(recipe), "--out", str(out), "--resume")
    assert f"{out} holds a completed run (2 epochs), and this recipe asks for no more (train.epochs 2)" in err
    assert "nothing in it was changed" in err and "--set train.epochs=4" in err and "another folder" in err
    assert snapshot(out) == before


def test_a_resume_of_a_diverged_run_is_refused(tiny, write_recipe, tmp_path, capsys):
    tiny["optim"] = {"name": "adamw", "lr": 1e6}
    recipe, out = write_recipe(tiny), tmp_path / "run"
    assert main(["train", str(recipe), "--out", str(out)]) == 3
    capsys.readouterr()
    before = snapshot(out)
    for extra in ([], ["--set", "train.epochs=4", "--set", "optim.lr=0.001"]):
        err = refused(capsys, "train", str(recipe), "--out", str(out), "--resume", *extra)
        assert f"{out} holds a run that diverged at step" in err and "nothing in it was changed" in err
        assert "Start a new run in another folder" in err
    assert snapshot(out) == before


def test_a_refused_resume_changes_nothing_in_the_run(finished, tiny, write_recipe, capsys):
    _, out = finished
    before = snapshot(out)
    tiny["model"]["args"]["width"] = 8
    tiny["log"]["tensorboard"] = True
    assert "different model" in refused(
        capsys, "train", str(write_recipe(tiny, "other.yaml")), "--out", str(out), "--resume", "--set", "train.epochs=3"
    )
    assert snapshot(out) == before  # no rewritten recipe.yaml, no new TensorBoard file


def test_a_schedule_of_another_length_is_a_clear_error(tiny, write_recipe, finished, capsys):
    _, out = finished
    tiny["schedule"] = {"name": "onecycle"}
    fresh = out.parent / "onecycle"
    assert main(["train", str(write_recipe(tiny)), "--out", str(fresh), "--set", "train.epochs=1"]) == 0
    capsys.readouterr()
    err = refused(capsys, "train", str(write_recipe(tiny)), "--out", str(fresh), "--resume")
    assert re.search(r"schedule planned as total_steps (\d+), but this recipe plans total_steps (\d+)", err)
    planned = re.search(r"total_steps (\d+), but this recipe plans total_steps (\d+)", err).groups()
    assert int(planned[0]) < int(planned[1])
    assert "recipe.yaml" in err


def test_a_diverging_run_stops_keeps_finite_weights_and_says_what_to_try(tiny, write_recipe, tmp_path, capsys):
    tiny["optim"] = {"name": "adamw", "lr": 1e6}
    tiny["train"] = {"epochs": 4}
    out = tmp_path / "run"
    assert main(["train", str(write_recipe(tiny)), "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert "training diverged: the loss became NaN or infinite by step" in err
    assert "optim.lr is 1e+06" in err and "train.clip_grad_norm" in err
    summary = strict((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["metrics"]["train_loss"] is None
    assert summary["steps"] < 4 * 4  # it stopped instead of training on NaN
    for line in (out / "metrics.jsonl").read_text().splitlines():
        strict(line)
    for path in (out / "checkpoints").glob("*.pt"):
        state = torch.load(path, weights_only=True)
        assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())


@pytest.mark.slow
def test_the_printed_resume_command_continues_the_same_run(tiny, write_recipe, tmp_path):
    tiny["schedule"] = {"name": "onecycle"}
    tiny["data"]["dataset"]["num_samples"] = 640  # 32 steps an epoch: room to interrupt, quick to resume
    tiny["train"] = {"epochs": 3}
    recipe, out = write_recipe(tiny), tmp_path / "run"
    run = subprocess.Popen(
        [sys.executable, "-m", "accel.cli", "train", str(recipe), "--set", "train.epochs=30", "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_first_checkpoint(out, run)
    run.send_signal(signal.SIGINT)
    _, err = finish(run)
    assert run.returncode == 130, err
    printed = err.strip().splitlines()[-1]
    assert printed.startswith("interrupted; continue with: accel train ")
    argv = printed.split("continue with: accel ", 1)[1].split()
    resumed = run_cli(*argv)
    assert resumed.returncode == 0, resumed.stderr
    assert strict((out / "summary.json").read_text())["epochs"] == 30  # the run's --set, not the file's 3


def test_an_unusable_out_is_a_clear_error(tiny, write_recipe, tmp_path, capsys):
    (tmp_path / "a-file").write_text("not a folder")
    for out in (tmp_path / "a-file", tmp_path / "a-file" / "sub"):
        assert "cannot use" in refused(capsys, "train", str(write_recipe(tiny)), "--out", str(out))
    assert (tmp_path / "a-file").read_text() == "not a folder"


def test_a_damaged_checkpoint_is_named_with_the_newest_intact_one(finished, capsys):
    recipe, out = finished
    last = out / "checkpoints" / "last.pt"
    last.write_bytes(bytes(range(256)) * 64)
    err = refused(capsys, "train", str(recipe), "--out", str(out), "--resume", "--set", "train.epochs=3")
    assert f"Checkpoint {last} is damaged or not a checkpoint" in err
    assert f"newest intact checkpoint beside it is {out / 'checkpoints' / 'epoch-002.pt'}" in err
    assert "weights_only=False" not in err  # torch's advice to load it unsafely is not passed on
    export = refused(capsys, "export", str(out))
    assert "is damaged" in export and "epoch-002.pt" in export


def test_a_resume_removes_what_a_killed_checkpoint_write_left(finished, capsys):
    recipe, out = finished
    stale = out / "checkpoints" / ".last.pt.abc123.tmp"
    stale.write_bytes(b"half a checkpoint")
    assert main(["train", str(recipe), "--out", str(out), "--resume", "--set", "train.epochs=3"]) == 0
    assert not stale.exists()


def test_a_mid_epoch_resume_ends_on_the_uninterrupted_train_loss(tiny, write_recipe, tmp_path):
    from accel.config.recipe import validate_recipe
    from accel.train.run import build_trainer

    tiny["train"] = {"epochs": 2}
    whole = build_trainer(validate_recipe(tiny)).fit()
    first = build_trainer(validate_recipe(tiny))
    per_epoch = len(first.train_loader)
    first.cfg.max_steps = per_epoch + 2  # stops 2 batches into the second epoch
    first.fit()
    state = first.state_dict()
    assert state["batch_in_epoch"] == 2 and state["meter"]["batches"] == 2
    resumed = build_trainer(validate_recipe(tiny))
    resumed.load_state_dict(state)
    assert resumed.fit()["metrics"]["train_loss"] == whole["metrics"]["train_loss"]


def test_an_error_in_a_loader_worker_shows_its_own_line_only():
    wrapped = DataError(
        "Caught DataError in DataLoader worker process 0.\nOriginal Traceback (most recent call "
        'last):\n  File "x.py", line 3, in load\n    raise DataError(...)\naccel.errors.DataError: '
        "cannot decode /data/a.jpg: truncated"
    )
    assert user_message(wrapped) == "cannot decode /data/a.jpg: truncated"
    assert user_message(DataError("plain")) == "plain"


def test_strict_json_writes_null_for_non_finite_numbers(tmp_path):
    from accel.runs.rundir import RunDir

    path = RunDir(tmp_path).write_json("x.json", {"loss": math.nan, "rates": [math.inf, 1.0]})
    assert strict(path.read_text()) == {"loss": None, "rates": [None, 1.0]}


class _Anything:  # a checkpoint holding an object: loading it would import and build this class
    pass


class _Shell:  # a checkpoint that runs a shell command when unpickled: torch words its refusal differently
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("holds, named", [("an object", "_Anything"), ("os.system", "posix.system")])
def test_a_checkpoint_with_code_in_it_is_refused_as_such(finished, capsys, tmp_path, holds, named):
    recipe, out = finished
    marker = tmp_path / "ran"
    torch.save({"model": _Anything() if holds == "an object" else _Shell(marker)}, out / "checkpoints" / "last.pt")
    for argv in (["train", recipe, "--out", out, "--resume", "--set", "train.epochs=3"], ["export", out]):
        err = refused(capsys, *map(str, argv))
        assert f"Refused to load {out / 'checkpoints' / 'last.pt'}: it holds code that loading it would run" in err
        assert named in err and "never runs code from a file" in err and "epoch-002.pt" in err
        assert "damaged" not in err and "weights_only=False" not in err and "Re-running" not in err
    assert not marker.exists()  # nothing ran
