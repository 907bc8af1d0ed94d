"""`accel train`: one process, or several through torchrun."""

from __future__ import annotations

import argparse
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import AccelError
from ..launch.torchrun_command import Launch
from ..launch.torchrun_command import add_options as add_launch_options
from ..runs.signals import PREEMPT, PREEMPTED_EXIT
from .options import add_sets

if TYPE_CHECKING:
    from ..runs.records import FitSummary

EXIT_CODES = {"completed": 0, "diverged": 3, "interrupted": 130, "preempted": PREEMPTED_EXIT}
PROFILE_WARMUP = 2  # steps before `--profile` records: compilation, the allocator, kernel choice


def add(commands) -> None:
    train = commands.add_parser("train", help="train a recipe into a run directory")
    train.add_argument("recipe", help="path to a recipe YAML file")
    add_sets(train)
    train.add_argument("--out", help="run directory (default: runs/<name>-<timestamp>)")
    train.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.pt")
    train.add_argument(
        "--profile",
        type=int,
        metavar="STEPS",
        help=f"profile STEPS optimizer steps after {PROFILE_WARMUP} warm-up steps; the report (as `accel profile` "
        "writes it) goes to OUT/profile/",
    )
    add_launch_options(train)
    train.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..config.recipe import load_recipe
    from ..io import default_out
    from ..strategy.world import under_torchrun, world_from_env
    from ..train.run import train_recipe

    if args.resume and not args.out:
        raise AccelError("--resume needs --out RUN_DIR: the run directory whose checkpoints/last.pt to continue.")
    recipe = load_recipe(args.recipe, args.overrides)  # validated here, before any process is started
    out = Path(args.out) if args.out else default_out(recipe.name)  # named once: every rank, every message
    if args.nproc:
        launch = Launch.from_args(args, out)
        _check_before_torchrun(args, launch, recipe, out)
        return _torchrun(args, launch, out)
    if args.max_restarts and not under_torchrun():
        raise AccelError("--max-restarts needs --nproc: torchrun restarts the processes it started.")
    try:
        summary = train_recipe(
            recipe, out, resume=args.resume, restartable=args.max_restarts > 0, callbacks=_profiler(args, out)
        )
    except KeyboardInterrupt as stop:  # Ctrl-C in start-up, or the third signal
        if world_from_env().is_main:
            print(interrupted_message(out, stop), file=sys.stderr)
        return signal_exit(getattr(stop, "signum", None))
    if not world_from_env().is_main:
        return 0
    return report(summary, recipe)


def _profiler(args: argparse.Namespace, out: Path) -> list:
    """`--profile STEPS`: a profile window in the writing process (rank 0) of this run."""
    from ..strategy.world import world_from_env

    if args.profile is None or not world_from_env().is_main:
        return []
    # only now: the report's plots need matplotlib, which a training-only environment (the XLA one) lacks
    from ..profile import profile_window
    from ..profile.steps import check_window
    from ..runs.rundir import RunDir

    check_window(PROFILE_WARMUP, args.profile)
    command = shlex.join(["accel", *args.argv])
    folder = RunDir(out, create=False).profile
    return [profile_window(PROFILE_WARMUP, args.profile, folder, command, args.recipe, overrides=args.overrides)]


def report(summary: FitSummary, recipe) -> int:
    """Print the run directory and how the run ended; return the exit code that says it."""
    from ..runs.rundir import resume_command

    print(summary.run_dir)
    if summary.status == "diverged":
        print(diverged_message(summary, recipe), file=sys.stderr)
        return 3
    if summary.status in {"interrupted", "preempted"}:  # the run's own resolved recipe: every --set is in it
        print(f"{summary.status}; continue with: {resume_command(summary.run_dir)}", file=sys.stderr)
        return EXIT_CODES[summary.status]
    return 0


def signal_exit(signum: int | None) -> int:
    """The exit code of a run a signal stopped: 75 for preemption (SIGUSR1), else 130 (Ctrl-C's)."""
    return PREEMPTED_EXIT if signum == PREEMPT else 130


def interrupted_message(out: Path, stop: BaseException) -> str:
    from ..runs.rundir import RunDir, resume_command
    from ..runs.signals import StartupInterrupted

    if isinstance(stop, StartupInterrupted):
        return (
            f"interrupted during start-up, before anything was written to {out}; run the same command again to start it"
        )
    if RunDir(out, create=False).has_checkpoint():
        return (
            "stopped at once, without the final checkpoint and summary; checkpoints/last.pt is the previous "
            f"checkpoint, intact; continue with: {resume_command(out)}"
        )
    return f"stopped at once, before the run's first checkpoint: nothing to resume in {out}"


def _check_before_torchrun(args: argparse.Namespace, launch: Launch, recipe, out: Path) -> None:
    """One clear refusal before torchrun starts, instead of one per rank (rank 0 checks again, holding the lock)."""
    from ..runs.rundir import RunDir
    from ..runs.runlock import RunDirLock
    from ..train.run import check_can_start

    if recipe.strategy == "fsdp" and launch.nproc * launch.nnodes > 1:
        from ..devices import resolve_device
        from ..speedups import from_configs, refuse
        from ..strategy import FullyShard

        refuse(from_configs(recipe.speedups), resolve_device(recipe.device), FullyShard())
    if not launch.checks_run_dir:
        return
    if launch.master_port:
        check_port_free(launch.master_port)
    run_dir = RunDir(out)
    with RunDirLock(run_dir.path):  # released before torchrun starts: rank 0 takes it, and must not find it held
        check_can_start(run_dir, recipe, args.resume)


def check_port_free(port: int) -> None:
    """torchrun's own error for a port in use is a page of tracebacks from every rank; say it before it starts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to torchrun too
        try:
            probe.bind(("", port))
        except OSError as err:
            raise AccelError(
                f"--master-port {port} is already in use on this machine ({err.strerror or err}): "
                "choose a free port, or leave out --master-port (with one machine, torchrun then "
                "picks a free one)."
            ) from None


def _torchrun(args: argparse.Namespace, launch: Launch, out: Path) -> int:
    """Re-run this same command in --nproc processes under torchrun, all writing to one run directory.

    SIGINT and SIGTERM are passed on to torchrun, which passes them to every rank; this process waits for them
    to save and then reports how the run ended, as one process would."""
    from ..launch.relay import run_torchrun

    argv = ["train", args.recipe, "--out", str(out), *(f"--set={item}" for item in args.overrides)]
    argv += ["--resume"] if args.resume else []
    argv += [f"--profile={args.profile}"] if args.profile is not None else []  # rank 0 profiles
    argv += [f"--max-restarts={launch.max_restarts}"] if launch.max_restarts else []  # each rank: a restart continues
    started = time.time()
    code, signalled = run_torchrun(launch.torchrun_command(argv), launch.torchrun_env())
    if signalled is None:
        return code
    summary = _read_summary(out, written_since=started)
    status = summary.status if summary is not None else None
    if status in EXIT_CODES:  # rank 0 printed the directory and, interrupted, the command that continues the run
        return EXIT_CODES[status]
    print(interrupted_message(out, KeyboardInterrupt()), file=sys.stderr)
    return signal_exit(signalled)


def _read_summary(out: Path, written_since: float) -> FitSummary | None:
    """summary.json if this run wrote it (an earlier part of a resumed run wrote one too)."""
    from ..runs.rundir import RunDir

    run = RunDir(out, create=False)
    try:
        if run.summary.stat().st_mtime < written_since:
            return None
    except OSError:
        return None
    return run.read_summary()


def diverged_message(summary: FitSummary, recipe) -> str:
    """What happened, what is kept, and what to try: a diverged run is a result to act on, not a crash."""
    from ..runs.rundir import RunDir
    from ..speedups import from_configs, precision_of

    run = RunDir(summary.run_dir, create=False)
    kept = (
        f"The last checkpoint with finite weights is {run.resume_checkpoint()}"
        if run.has_checkpoint()
        else "No checkpoint was kept"
    )
    tips = [f"a lower learning rate (optim.lr is {recipe.optim.lr:g})"]
    if recipe.train.clip_grad_norm is None:
        tips.append("gradient clipping (train.clip_grad_norm: 1.0)")
    if precision_of(from_configs(recipe.speedups)).name == "fp16":  # whichever speed-up gives the precision
        tips.append("bf16 instead of fp16, where the hardware has it")
    return (
        f"error: training diverged: the loss became NaN or infinite by step {summary.diverged_at_step}. "
        f"{kept}. Try {'; '.join(tips)}."
    )
