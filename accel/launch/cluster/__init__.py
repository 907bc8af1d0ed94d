"""Job files for cluster schedulers, written as text from pure functions: an sbatch script (slurm.py) and a
Kubernetes manifest (k8s.py). Each starts `accel train --nproc G` once per node; accel/launch/relay.py does the
rest, as on one machine."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from ...errors import AccelError
from ...runs.rundir import RunDir


@dataclass(frozen=True)
class Job:
    """One training run across `nodes` machines with `gpus_per_node` processes each."""

    name: str  # the recipe's name: the scheduler's job name
    recipe: str  # the recipe file as the nodes see it
    out: str  # the run directory as the nodes see it: shared by every node and every restart
    nodes: int
    gpus_per_node: int
    overrides: list[str] = field(default_factory=list)  # --set KEY=VALUE, passed on as given

    def __post_init__(self):
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise AccelError(
                f"--nodes and --gpus-per-node must be at least 1; got {self.nodes} and {self.gpus_per_node}."
            )

    def train_args(self) -> list[str]:
        """`accel train` arguments every node shares (a node adds its rank and the rendezvous)."""
        sets = [f"--set={item}" for item in self.overrides]
        return ["train", self.recipe, "--out", self.out, *sets, "--nproc", str(self.gpus_per_node)]


def dns_name(name: str) -> str:
    """A name Kubernetes and Slurm accept everywhere (an RFC 1035 label): lower-case letters, digits and '-',
    starting with a letter, at most 40 characters (room for the suffixes controllers add to pod names)."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not cleaned[:1].isalpha():
        cleaned = f"accel-{cleaned}"
    return cleaned[:40].rstrip("-")


def start_or_resume(job: Job) -> str:
    """Shell lines that set the array `train` to the `accel train` arguments of this attempt: a fresh start, or
    once the run directory has a checkpoint (a requeued job, a restarted pod) its continuation, with the run's
    own resolved recipe as `accel train` prints it (every --set is in it)."""
    run = RunDir(job.out, create=False)
    resume = ["train", str(run.recipe), "--out", job.out, "--resume", "--nproc", str(job.gpus_per_node)]
    whole, sharded = (shlex.quote(str(path)) for path in (run.last_checkpoint, run.sharded_checkpoint))
    return (
        f"if [ -f {whole} ] || [ -d {sharded} ]; then\n"  # last.pt, or the link to a sharded one (fsdp)
        f"    train=({shlex.join(resume)})\n"
        "else\n"
        f"    train=({shlex.join(job.train_args())})\n"
        "fi\n"
    )
