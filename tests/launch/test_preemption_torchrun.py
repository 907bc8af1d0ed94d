"""SIGUSR1 under `accel train --nproc 2` (torchrun, gloo on CPU): every rank stops at one step, the run saves and
exits with PREEMPTED_EXIT, and `--resume` finishes it. A cluster may signal the launcher alone (srun forwarding to
its task) or every process of the job step at once (proctrack/cgroup): both are covered."""

from __future__ import annotations

import signal
import subprocess
import sys

import psutil
import pytest

from accel.runs.records import read_summary
from accel.runs.signals import PREEMPTED_EXIT
from conftest import LIMIT_S, ROOT, finish, run_cli, wait_for_first_checkpoint

# several processes that import torch: bounded by their progress (conftest.finish), not by the suite's 600 s clock
pytestmark = pytest.mark.timeout(LIMIT_S)

EPOCHS = 40  # long enough that the signal lands mid-run; one step an epoch (51 training samples, 2 ranks x 16)


def _kill(processes) -> None:
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.mark.slow
@pytest.mark.parametrize("reached", ["launcher", "every process"])
def test_sigusr1_checkpoints_every_rank_exits_with_the_preemption_code_and_resumes(
    tiny, write_recipe, tmp_path, reached
):
    tiny["train"]["epochs"] = EPOCHS
    recipe, out = write_recipe(tiny), tmp_path / "run"
    run = subprocess.Popen(
        [sys.executable, "-m", "accel.cli", "train", str(recipe), "--out", str(out), "--nproc", "2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_first_checkpoint(out, run)  # three Pythons that import torch: minutes on 2 busy cores
    tree = psutil.Process(run.pid).children(recursive=True)  # torchrun and both ranks
    for process in [psutil.Process(run.pid), *(tree if reached == "every process" else [])]:
        process.send_signal(signal.SIGUSR1)
    try:
        _, err = finish(run)
        _, alive = psutil.wait_procs(tree, timeout=60)
    finally:
        _kill(tree)
    assert run.returncode == PREEMPTED_EXIT, err
    assert not alive, f"still running after accel train ended: {alive}"
    assert (
        err.strip().splitlines()[-1] == f"preempted; continue with: accel train {out}/recipe.yaml --out {out} --resume"
    )
    summary = read_summary(out / "summary.json")
    assert summary.status == "preempted" and 0 < summary.steps < EPOCHS
    resumed = run_cli("train", out / "recipe.yaml", "--out", out, "--resume", "--nproc", "2")
    assert resumed.returncode == 0, resumed.stderr
    summary = read_summary(out / "summary.json")
    assert summary.status == "completed" and summary.steps == EPOCHS
