"""`accel slurm`: the sbatch script's directives, its srun and accel lines, the preemption notice passed on, and the
requeue on PREEMPTED_EXIT. The script runs in bash with stand-ins for srun, scontrol and accel (no Slurm here)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from accel.cli import main
from accel.errors import AccelError
from accel.launch.cluster import Job, slurm
from accel.runs.signals import PREEMPTED_EXIT

FAKES = {
    # srun: log its options, run the command once per node as Slurm would, then end as told
    "srun": """
echo "srun $*" >> "$LOG"
while [[ "$1" == --* ]]; do shift; done
for node in 0 1; do SLURM_NODEID=$node "$@"; done
if [ -n "$WAIT_FOR_USR1" ]; then
    trap 'echo "srun got USR1" >> "$LOG"; kill "$idle"; exit 75' USR1  # as the tasks would: save, exit 75
    sleep 600 &
    idle=$!
    touch "$READY"
    wait "$idle"
fi
exit "${SRUN_EXIT:-0}"
""",
    "scontrol": """
if [ "$1" = show ]; then printf 'node-a\\nnode-b\\n'; else echo "scontrol $*" >> "$LOG"; fi
""",
    "accel": 'echo "accel $*" >> "$LOG"\n',
}


def job(tmp_path: Path) -> Job:
    return Job("tiny", str(tmp_path / "tiny.yaml"), str(tmp_path / "run"), nodes=2, gpus_per_node=4)


@pytest.fixture
def cluster(tmp_path):
    """Run a script as the batch shell: stand-ins on PATH, Slurm's variables set; returns (Popen, log file)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    for name, body in FAKES.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log), "READY": str(tmp_path / "ready")}
    env |= {"SLURM_JOB_ID": "1234", "SLURM_JOB_NODELIST": "node-[a-b]"}

    def start(script: str, **extra: str) -> subprocess.Popen:
        path = tmp_path / "job.sbatch"
        path.write_text(script)
        return subprocess.Popen(["bash", str(path)], env={**env, **extra}, stdout=subprocess.PIPE, text=True)

    return start, log


def test_the_script_asks_slurm_for_nodes_gpus_requeue_and_the_early_signal(tmp_path):
    text = slurm.script(job(tmp_path), time="4:00:00", partition="gpu")
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=tiny",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --time=4:00:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --requeue",
        f"#SBATCH --signal=B:USR1@{slurm.LEAD_S}",
        "#SBATCH --open-mode=append",
    ]
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


@pytest.mark.parametrize("srun_exit, requeued", [(0, False), (PREEMPTED_EXIT, True), (1, False)])
def test_one_srun_task_per_node_runs_accel_train_and_only_the_preemption_code_requeues(
    tmp_path, cluster, srun_exit, requeued
):
    start, log = cluster
    batch = start(slurm.script(job(tmp_path)), SRUN_EXIT=str(srun_exit))
    assert batch.wait(timeout=60) == srun_exit
    lines = log.read_text().splitlines()
    assert lines[0].startswith("srun --nodes=2 --ntasks=2 --ntasks-per-node=1 bash -c ")
    out, recipe = tmp_path / "run", tmp_path / "tiny.yaml"
    rendezvous = f"--nnodes 2 --master-addr node-a --master-port {20000 + 1234}"
    assert lines[1:3] == [
        f"accel train {recipe} --out {out} --nproc 4 {rendezvous} --node-rank {node}" for node in (0, 1)
    ]
    assert ("scontrol requeue 1234" in lines) == requeued


def test_a_requeued_job_resumes_from_the_checkpoint(tmp_path, cluster):
    start, log = cluster
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "last.pt").write_bytes(b"")
    assert start(slurm.script(job(tmp_path))).wait(timeout=60) == 0
    out = tmp_path / "run"
    assert f"accel train {out}/recipe.yaml --out {out} --resume --nproc 4 --nnodes 2" in log.read_text()


def test_usr1_to_the_batch_shell_reaches_srun_and_the_job_requeues(tmp_path, cluster):
    start, log = cluster
    batch = start(slurm.script(job(tmp_path)), WAIT_FOR_USR1="1")
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():
        assert batch.poll() is None and time.monotonic() < deadline, "srun never started"
        time.sleep(0.02)
    batch.send_signal(signal.SIGUSR1)  # what --signal=B:USR1 does, LEAD_S seconds before the time limit
    out, _ = batch.communicate(timeout=60)
    assert batch.returncode == PREEMPTED_EXIT
    assert "USR1 received" in out
    assert log.read_text().splitlines()[-2:] == ["srun got USR1", "scontrol requeue 1234"]


def test_bad_time_or_partition_is_refused(tmp_path):
    with pytest.raises(AccelError, match="--time '4 hours': expected one word"):
        slurm.script(job(tmp_path), time="4 hours")


def test_submit_without_sbatch_says_so_and_where_the_script_is(tiny, write_recipe, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    script = tmp_path / "job.sbatch"
    argv = ["slurm", str(write_recipe(tiny)), "--nodes", "2", "--gpus-per-node", "4", "--script", str(script)]
    assert main([*argv, "--out", str(tmp_path / "run"), "--submit"]) == 2
    err = capsys.readouterr().err
    assert "--submit: sbatch is not on PATH" in err and f"`sbatch {script}`" in err and "Traceback" not in err
    assert script.read_text().startswith("#!/bin/bash\n")


def test_submit_runs_sbatch_on_the_script(tiny, write_recipe, tmp_path, capsys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/bin/bash\necho "Submitted batch job 42 ($1)"\n')
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    script = tmp_path / "job.sbatch"
    argv = ["slurm", str(write_recipe(tiny)), "--nodes", "1", "--gpus-per-node", "1", "--script", str(script)]
    assert main([*argv, "--submit"]) == 0
    assert capsys.readouterr().out.splitlines() == [str(script), f"Submitted batch job 42 ({script})"]


def test_zero_nodes_is_refused_with_the_options_named(tiny, write_recipe, tmp_path, capsys):
    argv = ["slurm", str(write_recipe(tiny)), "--nodes", "0", "--gpus-per-node", "4", "--script", str(tmp_path / "j")]
    assert main(argv) == 2
    assert "--nodes and --gpus-per-node must be at least 1; got 0 and 4" in capsys.readouterr().err
    assert not (tmp_path / "j").exists()
