"""`accel slurm` and `accel k8s`: write the job file that runs a recipe on a cluster (accel/launch/cluster/)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from .options import add_sets


def add(commands) -> None:
    slurm = commands.add_parser("slurm", help="write (and --submit) an sbatch script that trains a recipe on N nodes")
    _add_job(slurm)
    slurm.add_argument("--out", help="run directory on the shared file system (default: runs/<name>-<timestamp>)")
    slurm.add_argument("--time", help="the job's time limit, as sbatch takes it (e.g. 4:00:00)")
    slurm.add_argument("--partition", help="the Slurm partition")
    slurm.add_argument("--script", help="where to write the script (default: <run directory name>.sbatch)")
    slurm.add_argument("--submit", action="store_true", help="run sbatch on the script")
    slurm.set_defaults(run=run_slurm)
    k8s = commands.add_parser("k8s", help="write a Kubeflow TrainJob manifest that trains a recipe on N nodes")
    _add_job(k8s)
    k8s.add_argument("--image", required=True, help="container image with accel installed")
    k8s.add_argument("--claim", default="accel-runs", help="ReadWriteMany PersistentVolumeClaim for run directories")
    k8s.add_argument("--runtime", default="torch-distributed", help="the ClusterTrainingRuntime to run on")
    k8s.add_argument("--out", help="run directory name, under /runs on the claim (default: <name>-<timestamp>)")
    k8s.add_argument("--manifest", help="where to write the manifest (default: <run directory name>.yaml)")
    k8s.set_defaults(run=run_k8s)


def _add_job(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", help="a recipe YAML file or a shipped recipe's name")
    add_sets(parser)
    parser.add_argument("--nodes", type=int, required=True, help="machines (pods) taking part")
    parser.add_argument("--gpus-per-node", type=int, required=True, help="processes (GPUs) on each machine")


def _job(args: argparse.Namespace, place: Callable[[str], str]):
    """The job, with its run directory placed by `place(default_out)`; the recipe is checked here, not on the
    cluster after a wait in the queue."""
    from ..config.recipe import load_recipe
    from ..io import default_out
    from ..launch.cluster import Job

    recipe = load_recipe(args.recipe, args.overrides)
    local = Path(args.recipe)
    given = str(local.resolve()) if local.is_file() else args.recipe  # a file every node sees, or a shipped name
    out = place(args.out or str(default_out(recipe.name)))
    return Job(recipe.name, given, out, args.nodes, args.gpus_per_node, list(args.overrides))


def run_slurm(args: argparse.Namespace) -> int:
    from ..launch.cluster import slurm

    job = _job(args, lambda out: str(Path(out).resolve()))  # one directory for every node and every requeue
    path = Path(args.script or f"{Path(job.out).name}.sbatch")
    path.write_text(slurm.script(job, time=args.time, partition=args.partition))
    print(path)
    if args.submit:
        print(slurm.submit(path))
    return 0


def run_k8s(args: argparse.Namespace) -> int:
    from ..launch.cluster import k8s

    job = _job(args, k8s.run_dir)
    path = Path(args.manifest or f"{Path(job.out).name}.yaml")
    path.write_text(k8s.dump(k8s.manifest(job, args.image, claim=args.claim, runtime=args.runtime)))
    print(path)
    return 0
