"""Sharded checkpoints (strategy fsdp, accel.runs.sharded_checkpoint): written by 2 processes, resumed by 1 and by 2
with the metrics of an uninterrupted run, and read whole by `accel export`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml

from accel.errors import CheckpointError
from accel.export.source import load_source
from accel.runs.checkpoint import load_checkpoint
from accel.runs.rundir import RunDir
from accel.runs.sharded_checkpoint import _read, commit
from conftest import finish
from tests.strategy.test_distributed import RECIPE, TOLERANCE, _summary, _train


def _finish(*runs) -> None:
    for run in runs:
        _, err = finish(run)
        assert run.returncode == 0, err


@pytest.fixture
def sharded(tmp_path):
    """test_distributed's recipe under fsdp, with a schedule whose length does not depend on the epochs."""
    path = tmp_path / "sharded.yaml"
    schedule = {"name": "step", "every_epochs": 1, "gamma": 0.5}
    path.write_text(yaml.safe_dump({**RECIPE, "strategy": "fsdp", "schedule": schedule}))
    return path


@pytest.mark.slow
def test_saved_by_two_processes_resumes_at_one_and_two_with_the_uninterrupted_metrics(sharded, tmp_path):
    four, two = ("--set", "train.epochs=4"), ("--set", "train.epochs=2")
    whole = _train(sharded, tmp_path / "whole", "--nproc", "2", *four)
    half = _train(sharded, tmp_path / "half", "--nproc", "2", *two, "--set", "checkpoint.background=false")
    _finish(half)
    folder = RunDir(tmp_path / "half", create=False).sharded_checkpoint
    assert folder.is_symlink() and not (tmp_path / "half" / "checkpoints" / "last.pt").exists()
    written = {path.name for path in folder.iterdir()}
    assert {".metadata", "__0_0.distcp", "__1_0.distcp", "trainer-0.pt", "trainer-1.pt"} <= written
    assert len(list(folder.parent.iterdir())) == 2, "the previous checkpoint's folder is removed"
    for out in ("at1", "at2"):
        shutil.copytree(tmp_path / "half", tmp_path / out, symlinks=True)
    at2 = _train(sharded, tmp_path / "at2", "--nproc", "2", "--resume", *four)
    at1 = _train(sharded, tmp_path / "at1", "--resume", *four, "--set", "data.batch_size=16")  # same global batch
    _finish(whole, at2, at1)
    expected = _summary(tmp_path / "whole")
    for out in ("at1", "at2"):
        resumed = _summary(tmp_path / out)
        assert resumed.steps == expected.steps == 4 * 16
        for key in ("train_loss", "val_loss", "val_accuracy"):
            assert resumed.metrics[key] == pytest.approx(expected.metrics[key], rel=TOLERANCE, abs=TOLERANCE)
    # export reads the shards of both ranks whole: the weights the one-process resume wrote into last.pt, but for
    # 32 steps of float32 sums in another order (its metrics agree to 1e-5; a shard misplaced would be far off)
    one = load_checkpoint(tmp_path / "at1" / "checkpoints" / "last.pt")["model"]
    exported = load_source(tmp_path / "at2").model.state_dict()
    assert exported.keys() == one.keys()
    for name, tensor in one.items():
        torch.testing.assert_close(exported[name], tensor, rtol=1e-3, atol=1e-3)


def test_a_commit_swaps_the_link_and_removes_the_previous_folder_only_after(tmp_path):
    run = RunDir(tmp_path)
    for name in (".step-00000005-0.tmp", ".step-00000005-1.tmp"):  # one step twice: an epoch's end, the run's
        (run.checkpoints / name).mkdir(parents=True)
        (run.checkpoints / name / "trainer-0.pt").write_text(name)
        commit(run, run.checkpoints / name)
    assert run.sharded_checkpoint.resolve().name == "step-00000005.1"
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["last", "step-00000005.1"]
    (run.checkpoints / ".step-00000009-2.tmp").mkdir()  # a save cut short: never made `last`, cleared on resume
    assert run.remove_stale_temp_files() and run.has_checkpoint()
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["last", "step-00000005.1"]


def test_values_other_than_tensors_are_read_as_plain_data_only(tmp_path):
    from torch.distributed.checkpoint import save

    with pytest.warns(UserWarning, match="single process"):
        save({"lr": 0.1, "code": Path("not plain data")}, checkpoint_id=tmp_path, no_dist=True)
    plain = {"lr": 0.0}
    _read(tmp_path, plain)
    assert plain == {"lr": 0.1}
    with pytest.raises(CheckpointError, match="could not be read .Unsupported global: GLOBAL pathlib.PosixPath"):
        _read(tmp_path, {"code": None})  # DCP alone would unpickle it with weights_only=False
