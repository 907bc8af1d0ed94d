"""`accel train`: one process, or several through torchrun."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from ..errors import AccelError
from .options import add_sets


def add(commands) -> None:
    train = commands.add_parser("train", help="train a recipe into a run directory")
    train.add_argument("recipe", help="path to a recipe YAML file")
    add_sets(train)
    train.add_argument("--out", help="run directory (default: runs/<name>-<timestamp>)")
    train.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.pt")
    train.add_argument("--nproc", type=int, default=None, help="processes on this machine, started by torchrun")
    train.add_argument("--nnodes", type=int, default=1, help="machines taking part (with --nproc)")
    train.add_argument("--node-rank", type=int, default=0, help="this machine's index (with --nnodes > 1)")
    train.add_argument("--master-addr", help="address of the machine with node rank 0 (with --nnodes > 1)")
    train.add_argument("--master-port", type=int, help="free port on the master machine")
    train.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..distributed import world_from_env
    from ..recipe import load_recipe
    from ..run import run_recipe

    if args.resume and not args.out:
        raise AccelError("--resume needs --out RUN_DIR: the run directory whose checkpoints/last.pt to continue.")
    recipe = load_recipe(args.recipe, args.overrides)  # validated here, before any process is started
    if args.nproc:
        if args.out and not args.resume:  # one clear refusal before torchrun starts (run_recipe checks one process)
            from ..rundir import RunDir

            RunDir(args.out).check_new()
        if recipe.strategy == "fsdp" and args.nproc * args.nnodes > 1:  # one clear error, not one per rank
            from ..fsdp import check_compatible
            from ..speedups import from_configs

            check_compatible(from_configs(recipe.speedups))
        return _torchrun(args, recipe.name)
    summary = run_recipe(recipe, args.out, resume=args.resume)
    if not world_from_env().is_main:
        return 0
    print(summary["run_dir"])
    if summary["status"] == "diverged":
        print(diverged_message(summary, recipe), file=sys.stderr)
        return 3
    if summary["status"] == "interrupted":  # the run's own resolved recipe: every --set is in it
        run_dir = summary["run_dir"]
        print(f"interrupted; continue with: accel train {run_dir}/recipe.yaml --out {run_dir} --resume",
              file=sys.stderr)
        return 130
    return 0


def _torchrun(args: argparse.Namespace, name: str) -> int:
    """Re-run this same command in --nproc processes under torchrun, all writing to one run directory."""
    from ..distributed import torchrun_command
    from ..rundir import RunDir

    out = args.out or str(RunDir.default_for(name).path)  # one name for all ranks, not one timestamp each
    argv = ["train", args.recipe, "--out", out, *(f"--set={item}" for item in args.overrides)]
    argv += ["--resume"] if args.resume else []
    command = torchrun_command(argv, args.nproc, args.nnodes, args.node_rank, args.master_addr, args.master_port)
    return subprocess.call(command)


def diverged_message(summary: dict, recipe) -> str:
    """What happened, what is kept, and what to try: a diverged run is a result to act on, not a crash."""
    last = Path(summary["run_dir"]) / "checkpoints" / "last.pt"
    kept = f"The last checkpoint with finite weights is {last}" if last.is_file() else "No checkpoint was kept"
    amp = recipe.speedups.get("amp")
    tips = [f"a lower learning rate (optim.lr is {recipe.optim.lr:g})"]
    if recipe.train.clip_grad_norm is None:
        tips.append("gradient clipping (train.clip_grad_norm: 1.0)")
    if amp is not None and amp.enabled and getattr(amp, "dtype", None) == "fp16":
        tips.append("bf16 instead of fp16 (speedups.amp.dtype: bf16), where the hardware has it")
    return (f"error: training diverged: the loss became NaN or infinite by step {summary['diverged_at_step']}. "
            f"{kept}. Try {'; '.join(tips)}.")
