"""`accel tune [OPTIONS] -- python train.py ARGS`: tune's stages on a user's own script (accel.bench.tune.script)."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import replace
from pathlib import Path

from ..errors import AccelError
from . import tune_study
from .options import check_trial_options, trial_steps
from .tune import SPEED_STEPS, TIME_STEPS, tuned


def tune_script(args: argparse.Namespace) -> int:
    from ..bench.script import SCRIPT_TIMEOUT_S, script_name
    from ..bench.target import parse_target
    from ..bench.trial_process import TrialSettings
    from ..bench.tune import Objective, check_fragment_out
    from ..bench.tune.script import ScriptSubject, comments, speed_knobs, time_knobs, write_script_fragment
    from ..io import default_out

    time = _check(args)
    own_run = time and args.steps is None  # each trial runs the script to its own end (or the target)
    trial_steps(args, SPEED_STEPS[0])
    args.warmup = (TIME_STEPS if time else SPEED_STEPS)[1] if args.warmup is None else args.warmup
    check_trial_options(args)
    target = parse_target(args.target, any_metric=True) if args.target else None
    work = Path(args.work) if args.work else default_out(script_name(args.user_script), kind="tune")
    workers = tune_study.prepare(args, work)
    out = Path(args.out) if args.out else work / "tuned.yaml"
    check_fragment_out(out)  # before the probe, which runs the script until it creates its engine
    subject = ScriptSubject.probed(args.user_script, args.overrides, args.timeout)
    if time:
        knobs = time_knobs(subject, args.lr_arg, args.batch_arg, args.batch_sizes, args.tries, args.speedups)
    else:
        knobs = speed_knobs(subject, args.speedups, args.batch_arg, args.batch_sizes, args.tries)
    if not knobs:
        raise AccelError(_nothing_to_tune(time))
    # a script without an engine trains as long as it likes: a trial of some steps must not (its own run may)
    timeout = args.timeout or (None if own_run else SCRIPT_TIMEOUT_S)
    settings = TrialSettings(
        0 if own_run else args.steps,
        args.warmup,
        timeout,
        args.warm_cache,
        evaluate=False,
        metric_patterns=tuple(args.metric_pattern),
        window=0.0 if own_run else args.window,
    )
    # --objective time searches the speed-ups first in the speed objective's short trials (accel.bench.tune.levers)
    short = args.timeout or SCRIPT_TIMEOUT_S
    speed = replace(settings, steps=SPEED_STEPS[0], warmup=SPEED_STEPS[1], timeout=short, window=args.window)
    objective = Objective(args.objective, target, speed=speed if time else None, prune=args.prune)
    result = tuned(args, work, workers, subject, knobs, settings, objective)
    if result is None:
        return 130
    check_fragment_out(out)  # again: the search took minutes, and the file may have appeared since
    head = comments(result, shlex.join(["accel", *args.argv]), settings, args.trials)
    path, line = write_script_fragment(result, subject, out, head)
    print(path)
    print(line)
    return 0


def _check(args: argparse.Namespace) -> bool:
    """Options a script cannot take, refused before the probe runs it; whether the objective is time."""
    if not args.user_script:
        raise AccelError("no script after `--`: give its command, e.g. `accel tune -- python train.py`.")
    if args.recipe is not None:
        raise AccelError(f"give a recipe or a script, not both: `{args.recipe}` and `{' '.join(args.user_script)}`.")
    time = args.objective == "time"
    if (args.workers and not time) or args.threads or args.eval_batches is not None:
        raise AccelError(
            "--workers, --threads and --eval-batches set a recipe's keys; a script's loader and evaluation are its "
            "own: vary its options with --try arg:--OPTION=V1,V2, or engine keys with --try KEY=V1,V2."
        )
    if not time and (args.target or args.lr_arg or not args.prune):
        raise AccelError(
            "--target, --lr-arg and --no-prune need --objective time (the speed objective measures samples/s)."
        )
    if args.target:
        from ..bench.target import parse_target

        parse_target(args.target, any_metric=True)  # a script logs what it logs: eval_loss, val/loss...
    return time


def _nothing_to_tune(time: bool) -> str:
    if time:
        return (
            "nothing to tune for time: no speed-up to try here (or --no-speedups); name the script's learning-rate "
            "and batch-size options (--lr-arg=--lr --batch-arg=--batch), or --try KEY=V1,V2 (the engine's "
            "optimizer is muon already)."
        )
    return "nothing to tune: every knob was given an empty list, or --no-speedups with no --batch-arg or --try."
