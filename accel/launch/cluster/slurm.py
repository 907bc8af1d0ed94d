"""The sbatch script `accel slurm` writes: one `srun` task per node, each running `accel train --nproc G --nnodes N
--node-rank $SLURM_NODEID` (torchrun with the first node as master), and a job that requeues itself when warned
of its end.

How the warning reaches accel: `--signal=B:USR1@LEAD_S` has Slurm send SIGUSR1 to the batch shell alone, LEAD_S
seconds before the time limit (without `B:` it goes to every job step and not to the shell). The shell runs srun
in the background so that its trap runs at once, and the trap sends SIGUSR1 to srun, which forwards it to its task
on every node: `accel train`, which passes it to torchrun, which passes it to the ranks (accel/launch/relay.py,
accel/launch/torchrun.py). They finish the step, checkpoint and exit PREEMPTED_EXIT (accel/runs/signals.py); srun
returns it,
and the shell requeues the job. Some Slurm set-ups signal every process of the step instead; every level takes a
repeated SIGUSR1 as one notice. The requeued job runs this script again, which resumes from the checkpoint.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from ...errors import AccelError
from ...runs.signals import PREEMPT, PREEMPTED_EXIT
from . import Job, dns_name, start_or_resume

LEAD_S = 120  # warning before the time limit: time for one step and a checkpoint write on a slow file system
PORT_BASE, PORT_SPAN = 20000, 20000  # master port from the job id: two jobs sharing a node do not collide


def script(job: Job, time: str | None = None, partition: str | None = None) -> str:
    """The sbatch script for `job`. `time` and `partition` are passed to Slurm as given (it checks them)."""
    for option, value, example in (("--time", time, "4:00:00"), ("--partition", partition, "gpu")):
        if value is not None and (not value.strip() or any(c.isspace() for c in value)):
            raise AccelError(f"{option} {value!r}: expected one word, such as {option} {example}.")
    signal_name = PREEMPT.name.removeprefix("SIG")
    return "\n".join(
        [
            "#!/bin/bash",
            f"# written by `accel slurm` for {job.recipe}; submit with `sbatch` (`accel slurm --submit` does)",
            f"#SBATCH --job-name={dns_name(job.name)}",
            f"#SBATCH --nodes={job.nodes}",
            "#SBATCH --ntasks-per-node=1",
            f"#SBATCH --gpus-per-node={job.gpus_per_node}",
            *([f"#SBATCH --time={time}"] if time else []),
            *([f"#SBATCH --partition={partition}"] if partition else []),
            "#SBATCH --requeue",
            f"#SBATCH --signal=B:{signal_name}@{LEAD_S}",
            "#SBATCH --open-mode=append",  # a requeued job adds to its log instead of replacing it
            "",
            _body(job, signal_name),
        ]
    )


def _body(job: Job, signal_name: str) -> str:
    return f"""\
# the preemption notice (accel/launch/cluster/slurm.py): passed to srun, which forwards it to every node's accel train
step=""
notified=""
trap 'echo "accel slurm: {signal_name} received: the run checkpoints and the job requeues"; notified=1; \\
[ -n "$step" ] && kill -{signal_name} "$step"' {signal_name}

{start_or_resume(job)}\
master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
train+=(--nnodes {job.nodes} --master-addr "$master" --master-port $(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN})))

# one task per node; each adds its own node rank, which only exists inside the task
srun --nodes={job.nodes} --ntasks={job.nodes} --ntasks-per-node=1 \\
    bash -c 'exec accel "$@" --node-rank "$SLURM_NODEID"' accel-node "${{train[@]}}" &
step=$!
[ -n "$notified" ] && kill -{signal_name} "$step"  # the notice came before srun started
wait "$step"
code=$?
while [ -n "$notified" ]; do  # the trap cut `wait` short: wait again, for srun's own exit code (bash keeps it)
    notified=""
    wait "$step"
    code=$?
done
if [ "$code" -eq {PREEMPTED_EXIT} ]; then  # checkpointed on the notice: run again, resuming
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$code"
"""


def submit(path: Path) -> str:
    """Run `sbatch PATH`; return what it printed ("Submitted batch job ID")."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise AccelError(
            f"--submit: sbatch is not on PATH, so this machine cannot submit to Slurm. The script is written: "
            f"{path}; submit it from a Slurm login node with `sbatch {shlex.quote(str(path))}`."
        )
    done = subprocess.run([sbatch, str(path)], capture_output=True, text=True)
    if done.returncode:
        raise AccelError(f"sbatch {path} failed (exit {done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()
