"""`accel run [--nproc N ...] [--set KEY=V ...] -- python train.py ARGS`: a user's own script, in one process or in
several through torchrun (the launcher options of `accel train`), its engine's settings in ACCEL_SET."""

from __future__ import annotations

import argparse
import shlex
import sys

from ..errors import AccelError
from ..launch.torchrun_command import Launch
from ..launch.torchrun_command import add_options as add_launch_options
from .options import add_sets
from .train import signal_exit


def add(commands) -> None:
    parser = commands.add_parser(
        "run",
        help="run your own script (`-- python train.py ARGS`) with engine settings from --set, in one process or "
        "several through torchrun",
    )
    add_sets(parser)
    add_launch_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Start the script and wait: its exit code, or 130 (75 for SIGUSR1) when a signal stopped it, as `accel
    train` reports a run."""
    from ..bench.script import ScriptLaunch
    from ..engine.settings import SET_VARIABLE, engine_settings
    from ..launch.relay import run_torchrun
    from ..quiet import quiet_logs

    if not args.user_script:
        raise AccelError("accel run needs your script after the options: `accel run -- python train.py ARGS`.")
    accel_set = ScriptLaunch(tuple(args.user_script), tuple(args.overrides)).accel_set()
    # a bad key fails now, not in every rank; the script's engine logs each override it applies
    with quiet_logs("accel"):
        engine_settings({}, "auto", None, env={SET_VARIABLE: accel_set})
    env = {SET_VARIABLE: accel_set}
    if args.nproc:
        launch = Launch.from_args(args, out=None)
        command, env, to = (
            launch.script_command(args.user_script),
            env | launch.torchrun_env(),
            "torchrun and its ranks",
        )
    elif args.max_restarts or args.nnodes > 1:
        raise AccelError("--max-restarts and --nnodes need --nproc: torchrun starts (and restarts) the processes.")
    else:
        command, to = args.user_script, "the script"
    try:
        code, signalled = run_torchrun(command, env, to=to)
    except OSError as err:
        raise AccelError(f"cannot run `{shlex.join(args.user_script)}`: {err}") from None
    if signalled is None:
        return code if code >= 0 else 128 - code  # killed by a signal: as a shell reports it
    print(f"stopped by signal {signalled}: `{shlex.join(args.user_script)}` exited with {code}", file=sys.stderr)
    return signal_exit(signalled)
