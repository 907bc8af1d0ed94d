"""One writer per run directory: a second `accel train` or `--resume` is refused with the holder's PID and
changes nothing; the lock dies with its process, so a killed run can be resumed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from accel.cli import main
from accel.runs.runlock import RunDirLock
from conftest import ROOT, wait_for_first_checkpoint
from tests.runs.test_rundir import refused, snapshot


def test_a_second_writer_is_refused_with_the_holders_pid_and_changes_nothing(tiny, write_recipe, tmp_path, capsys):
    recipe, out = write_recipe(tiny), tmp_path / "run"
    assert main(["train", str(recipe), "--out", str(out), "--set", "train.epochs=1"]) == 0
    capsys.readouterr()
    before = snapshot(out)
    with RunDirLock(out):  # this process, as a run that is still training would
        for extra in ([], ["--resume"], ["--nproc", "2"], ["--nproc", "2", "--resume"]):
            err = refused(capsys, "train", str(recipe), "--out", str(out), *extra)
            assert f"{out} is in use: accel process {os.getpid()} is writing to it" in err, extra
            assert "Nothing in it was changed" in err and f"kill -INT {os.getpid()}" in err
        assert (out / ".lock").read_text() == f"{os.getpid()}\n"
    assert (out / ".lock").read_text() == ""  # emptied on release: a PID in it always names a living holder
    assert snapshot(out) == before


@pytest.mark.slow
def test_a_run_still_training_refuses_a_resume_and_frees_its_directory_when_killed(
    tiny, write_recipe, tmp_path, capsys
):
    tiny["data"]["dataset"]["num_samples"] = 640
    recipe, out = write_recipe(tiny), tmp_path / "run"
    run = subprocess.Popen(
        [sys.executable, "-m", "accel.cli", "train", str(recipe), "--out", str(out), "--set", "train.epochs=100"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_first_checkpoint(out, run)
        err = refused(capsys, "train", str(recipe), "--out", str(out), "--resume", "--set", "train.epochs=100")
        assert f"accel process {run.pid} is writing to it" in err
    finally:
        run.send_signal(signal.SIGKILL)
        run.communicate()
    assert not (out / "summary.json").exists(), "killed too late: the run had finished"
    RunDirLock(out).acquire().release()  # the OS released the dead writer's lock
