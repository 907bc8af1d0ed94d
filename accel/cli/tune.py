"""`accel tune`: speed-ups, batch size, workers and threads chosen by measurement, or the learning knobs by time to
quality, for a recipe (here) or a user's script (tune_script.py); the study's options in tune_study.py."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..errors import AccelError
from ..runs.runlock import hold
from . import tune_study
from .options import (
    add_metric_pattern,
    add_sets,
    add_trial_options,
    check_trial_options,
    parse_duration,
    trial_steps,
)

SPEED_STEPS, TIME_STEPS = (10, 3), (60, 1)  # (steps, warmup) per objective: a speed, and a short run
TIME_EVAL_BATCHES = 4
TUNE_TRIALS = 3  # rounds a stage runs first (with a budget, more while undecided)


def add(commands) -> None:
    tune_parser = commands.add_parser(
        "tune",
        help="choose speed-ups, batch size, workers and threads by measurement, for a recipe or your own script "
        "(`-- python train.py ARGS`); write the best as YAML",
    )
    tune_parser.add_argument(
        "recipe",
        nargs="?",
        help="a recipe: its YAML file or a shipped recipe's name (`accel recipes`); or, after all options, your "
        "script: `-- python train.py ARGS`, unchanged or with accel.Engine (docs/own-loop.md)",
    )
    add_sets(tune_parser)
    tune_parser.add_argument(
        "--batch-sizes",
        metavar="B1,B2",
        help="candidates, tried ascending until one fails "
        "(default: half, 1x, 2x, 4x the recipe's); an empty value skips the knob",
    )
    tune_parser.add_argument(
        "--workers",
        metavar="N1,N2",
        help="DataLoader worker counts (default: 0,1,2,4 up to the cores); an empty value skips the knob. With "
        "--objective time: N worker processes sharing the study (one GPU each, or a slice of the cores each)",
    )
    tune_parser.add_argument(
        "--threads",
        metavar="N1,N2",
        help="torch thread counts, via the speed-up that declares one "
        "(default: powers of two up to the cores); an empty value skips the knob",
    )
    tune_parser.add_argument(
        "--no-speedups",
        dest="speedups",
        action="store_false",
        help="leave the speed-ups as the recipe has them (default: try amp, channels_last, "
        "attention, fused optimizer and compile, each kept only if it measurably helps, for either objective)",
    )
    tune_parser.add_argument(
        "--budget",
        type=parse_duration,
        default=parse_duration("15m"),
        metavar="15m",
        help="wall-clock budget (s, m or h): knobs whose trials would not fit are left as "
        "the recipe has them (default 15m)",
    )
    tune_parser.add_argument(
        "--try",
        dest="tries",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="also search any other recipe key (repeatable)",
    )
    tune_parser.add_argument(
        "--objective",
        choices=("speed", "time"),
        default="speed",
        help="speed: samples/s (speed-ups, batch size, workers, threads); time: the wall time until a validation "
        "target (the speed-ups that raise samples/s and keep the results, then optimizer, learning rate by a range "
        "test, batch size with the learning rate scaled, on top of them)",
    )
    tune_parser.add_argument(
        "--no-prune",
        dest="prune",
        action="store_false",
        help="with --objective time: run every candidate's trial to the target or its end (default: stop one once "
        "it cannot be sooner than the reference beside it: past 1.2x its time, or too slow at its fastest pace)",
    )
    tune_parser.add_argument(
        "--target",
        metavar="METRIC=VALUE",
        help="with --objective time: the validation target (default: what the recipe as given reaches at the end "
        "of a trial's run)",
    )
    tune_parser.add_argument(
        "--eval-batches",
        type=int,
        metavar="N",
        help=f"with --objective time: validation batches per evaluation, the same for every trial "
        f"(default {TIME_EVAL_BATCHES}; 0: all; a recipe's)",
    )
    tune_parser.add_argument(
        "--lr-arg",
        metavar="=--OPTION",
        help="a script's learning-rate option, varied with --objective time, e.g. --lr-arg=--lr (its value must be "
        "on the script's command line)",
    )
    tune_parser.add_argument(
        "--batch-arg",
        metavar="=--OPTION",
        help="a script's batch-size option, searched like a recipe's batch size, e.g. --batch-arg=--batch",
    )
    add_trial_options(
        tune_parser,
        steps=f"{SPEED_STEPS[0]}, or {TIME_STEPS[0]} with --objective time",
        warmup=f"{SPEED_STEPS[1]}, or {TIME_STEPS[1]} with --objective time",
        trials=f"{TUNE_TRIALS}, and more while a stage is undecided and its share of --budget allows; given: "
        "exactly that many",
    )
    tune_parser.add_argument(
        "--out",
        help="recipe fragment to write (default: WORK/tuned.yaml); an existing file only if an earlier tune wrote it",
    )
    add_metric_pattern(tune_parser)
    tune_parser.add_argument(
        "--work",
        help="folder for trial recipes and logs (default: runs/tune-<name>-<timestamp>); with --objective time, "
        "one a killed tune left continues its study",
    )
    tune_study.add_options(tune_parser)
    tune_parser.set_defaults(run=tune)


def tune(args: argparse.Namespace) -> int:

    from ..bench.target import check_target_metric, parse_target
    from ..bench.trial_process import TrialSettings
    from ..bench.tune import Objective, check_fragment_out, time_settings, write_fragment
    from ..config.recipe import load_recipe
    from ..io import default_out

    if args.join:
        return tune_study.join(args)
    if args.dashboard:
        return tune_study.dashboard(args)
    args.add_rounds = args.trials is None  # --trials N as given is a fixed design, as in bench
    args.trials = TUNE_TRIALS if args.trials is None else args.trials
    if args.user_script is not None:
        from .tune_script import tune_script

        return tune_script(args)
    if args.recipe is None:
        raise AccelError("accel tune needs a recipe, or a script after the options: `-- python train.py ARGS`.")
    if args.lr_arg or args.batch_arg:
        raise AccelError(
            "--lr-arg and --batch-arg name a script's options; a recipe's are optim.lr and data.batch_size."
        )
    if args.metric_pattern:
        raise AccelError("--metric-pattern is for scripts (`-- python train.py`): a recipe's task reports its metrics.")
    time = args.objective == "time"
    default_steps, default_warmup = TIME_STEPS if time else SPEED_STEPS
    trial_steps(args, default_steps)
    args.warmup = default_warmup if args.warmup is None else args.warmup
    check_trial_options(args)
    base = load_recipe(args.recipe, args.overrides)
    work = Path(args.work) if args.work else default_out(base.name, kind="tune")
    workers = tune_study.prepare(args, work)
    knobs = _tune_knobs(args, base)
    if not knobs:
        raise AccelError("nothing to tune: every knob was given an empty list.")
    out = Path(args.out) if args.out else work / "tuned.yaml"
    check_fragment_out(out)  # now, not after a search of minutes
    # a time trial trains on the run's samples, whatever they take: the window is its speed-up stages'
    window = 0.0 if time else args.window
    settings = TrialSettings(args.steps, args.warmup, args.timeout, args.warm_cache, evaluate=False, window=window)
    # the time objective's speed-up stages run the speed objective's short trials (accel/bench/tune/levers.py)
    speed = TrialSettings(*SPEED_STEPS, args.timeout, args.warm_cache, evaluate=False, window=args.window)
    speed = speed if time else None
    target = parse_target(args.target) if args.target else None
    objective = Objective(args.objective, target, speed=speed, prune=args.prune)
    if objective.target is not None:
        check_target_metric(objective.target, [base.task])
    if time:
        eval_batches = TIME_EVAL_BATCHES if args.eval_batches is None else args.eval_batches
        settings = time_settings(settings, base, eval_batches)
    result = tuned(args, work, workers, base, knobs, settings, objective)
    if result is None:
        return 130
    check_fragment_out(out)  # again: the search took minutes, and the file may have appeared since
    path = write_fragment(result, out, base, shlex.join(["accel", *args.argv]), settings, args.trials)
    print(path)
    return 0


WIDE_TABLE = 240  # columns of tune's table where its output is not a terminal


def tuned(args: argparse.Namespace, work: Path, workers: int, subject, knobs: list, settings, objective):
    """tune's search of `subject` (a recipe or a script) on its study, as `searched` runs and reports it."""
    from ..bench.tune import tune as run_tune

    study = tune_study.study_of(args, work, workers)
    run = dict(budget_s=args.budget, final_check=True, objective=objective, study=study, add_rounds=args.add_rounds)
    return searched(lambda: run_tune(subject, knobs, work, settings, args.trials, **run), work, study)


def searched(search, work: Path, study=None):
    """Run tune's search and print its table and warnings; None when Ctrl-C or SIGTERM cut it short."""
    from rich.console import Console

    from ..bench.tune import NOTHING_MEASURED, final_lines, table, write_page
    from ..measure.load import busy_note

    try:
        with hold(work):  # a second tune there is refused while this one runs
            result = search()
    except KeyboardInterrupt:
        again = f"; the same command with --work {work} continues its study" if study else ""
        print(
            f"interrupted: no fragment written (nothing chosen from a search cut short); the trials so far are "
            f"under {work}{again}",
            file=sys.stderr,
        )
        return None
    finally:
        tune_study.stop(study)
    busy = busy_note(result.loads)
    if busy:
        print(f"warning: busy machine. {busy}", file=sys.stderr)
    if result.files:
        print(f"your files: {result.files}", file=sys.stderr)
    if pruned := result.pruned_line():
        print(pruned, file=sys.stderr)
    console = Console()
    if not console.is_terminal:  # a file or a pipe: rich would cut the table to 80 columns ("speedups…")
        console = Console(width=WIDE_TABLE)
    console.print(table(result))
    if not result.compared and result.final is None:
        print(f"warning: {NOTHING_MEASURED}", file=sys.stderr)
    given = result.final.given.removesuffix(" as given") if result.final else "recipe"
    page = write_page(result, work, final_lines(result, given))
    print(f"{page}: the search's history and each knob's importance", file=sys.stderr)
    return result


def _tune_knobs(args: argparse.Namespace, base) -> list:
    from ..bench.tune import build_knobs, time_knobs
    from ..devices import resolve_device

    device = resolve_device(base.device)
    if args.objective == "time":
        if args.workers or args.threads:
            raise AccelError(
                "--objective time tunes the speed-ups, optimizer, learning rate and batch size; --workers and "
                "--threads belong to --objective speed (run it first, then tune its result for time)."
            )
        return time_knobs(base, args.batch_sizes, args.tries, speedups=args.speedups, device=device)
    if args.target or not args.prune:
        raise AccelError("--target and --no-prune need --objective time (the speed objective measures samples/s).")
    return build_knobs(
        base, args.batch_sizes, args.workers, args.threads, args.tries, speedups=args.speedups, device=device
    )
