"""`accel bench`: variants of a recipe or of a user's script, measured in fresh processes, with verdicts."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..errors import AccelError
from ..runs.runlock import hold
from . import bench_rev
from .options import (
    add_metric_pattern,
    add_sets,
    add_trial_options,
    check_trial_options,
    parse_duration,
    positive_int,
    trial_steps,
)

BENCH_STEPS = 20


def add(commands) -> None:
    bench_parser = commands.add_parser(
        "bench",
        help="A/B speed report: variants of a recipe or of your own script (`-- python train.py ARGS`), "
        "each trial a fresh process",
    )
    bench_parser.add_argument(
        "recipe",
        nargs="?",
        help="a recipe: its YAML file or a shipped recipe's name (`accel recipes`); or, after all options, your "
        "script: `-- python train.py ARGS` or `train.py ARGS`, unchanged or with accel.Engine (docs/own-loop.md)",
    )
    add_sets(bench_parser)
    bench_parser.add_argument(
        "--ablate",
        action="store_true",
        help="baseline (speed-ups off), all on, each removed from all, each added to baseline",
    )
    bench_parser.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="compare values of any recipe key (for a script: engine keys, or its own option as arg:--OPTION, a "
        "flag by its presence: arg:--channels-last=absent,present); several --vary give their cartesian product",
    )
    add_trial_options(
        bench_parser, steps=BENCH_STEPS, warmup=3, trials="exactly that many; left out: 3, then more until decided"
    )
    add_round_options(bench_parser)
    bench_parser.add_argument(
        "--target",
        metavar="METRIC=VALUE",
        help="also time each trial from its process start until a validation metric reaches "
        "VALUE (e.g. val_accuracy=0.97, val_loss=1.5; losses count down, accuracies up)",
    )
    add_metric_pattern(bench_parser)
    bench_parser.add_argument(
        "--run-steps",
        type=positive_int,
        metavar="N",
        help="the optimizer steps of your real run: a variant that repays its start-up (compilation) only later is "
        "not recommended (default: what the run declares, a recipe's budget or a Trainer's max_steps; unknown: the "
        "report says from which length each pays)",
    )
    bench_parser.add_argument(
        "--eval-every",
        type=int,
        metavar="N",
        help="with --target: evaluate every N steps (default: a tenth of the trial's steps)",
    )
    bench_parser.add_argument(
        "--sync",
        choices=["step", "window"],
        default="step",
        help="step: synchronise the device after every step, for exact step times (default); window: only around "
        "the timed steps, so the host prepares the next batch while the device works, as in a real run (on a CPU "
        "the two are the same)",
    )
    bench_parser.add_argument("--out", help="output folder (default: runs/bench-<name>-<timestamp>)")
    bench_parser.add_argument("--list", action="store_true", help="print the variants and exit without running them")
    bench_parser.add_argument(
        "--aa",
        action="store_true",
        help="an A/A bench: the recipe or script against itself, to measure what this machine can resolve and how "
        "long a verdict at 3%%, 5%% and 10%% takes here",
    )
    bench_parser.add_argument(
        "--only",
        type=lambda text: text.split(","),
        default=None,
        metavar="NAME,NAME",
        help="run only these variants (the baseline is always run), e.g. --only all",
    )
    bench_rev.add_options(bench_parser)
    bench_parser.set_defaults(run=bench)


def bench(args: argparse.Namespace) -> int:
    from ..bench.plan import plan_bench
    from ..bench.runner import run_bench
    from ..bench.variants import describe
    from ..io import default_out
    from ..runs.rundir import check_results_out

    if bench_rev.wanted(args):
        return bench_rev.bench_revisions(args)
    if args.user_script is not None:
        return bench_script(args)
    if args.recipe is None:
        raise AccelError("accel bench needs a recipe, or a script after the options: `-- python train.py ARGS`.")
    as_aa(args, "name=aa-1,aa-2")  # a recipe's name changes nothing it computes
    plan = plan_bench(args.recipe, args.overrides, args.ablate, args.vary, args.only)
    if args.list:
        print(describe(plan.variants))
        return 0
    settings = recipe_settings(args)
    if args.target:
        from ..bench.target import check_target_metric, parse_target

        # a target the task never reports fails now, not in every trial
        check_target_metric(parse_target(args.target), (r.task for r in plan.recipes.values()))
    out = Path(args.out) if args.out else default_out(plan.name, kind="bench")
    check_results_out(out, "bench")
    with hold(out):  # a second bench there is refused while this one runs
        report, _ = run_bench(plan, out, settings, args.rounds, command=shlex.join(["accel", *args.argv]))
    return finish(report, out, args.aa)


def recipe_settings(args: argparse.Namespace):
    """How a recipe's trials run, from the options; those that do not fit a recipe are refused."""
    from ..bench.trial_process import TrialSettings

    if args.window is None and args.steps is None:
        # a recipe's trial sizes its learning-rate schedule for the steps it may take: a window by time would
        # stretch it to the window's most steps, so a recipe's default stays a count
        args.window = 0.0
    trial_steps(args, BENCH_STEPS)
    plan_rounds(args)
    check_trial_options(args)
    if args.target:
        from ..bench.target import parse_target

        parse_target(args.target)  # a malformed target fails now, not in every trial
    if args.metric_pattern:
        raise AccelError("--metric-pattern is for scripts (`-- python train.py`): a recipe's task reports its metrics.")
    if args.eval_every is not None and (args.eval_every < 1 or not args.target):
        raise AccelError("--eval-every N needs N >= 1 and a --target")
    return TrialSettings(
        args.steps,
        args.warmup,
        args.timeout,
        args.warm_cache,
        args.target,
        args.eval_every,
        sync=args.sync,
        run_steps=args.run_steps,
        window=args.window,
    )


def script_settings(args: argparse.Namespace):
    """How a script's trials run, from the options; those that do not fit a script are refused."""
    from ..bench.script import SCRIPT_TIMEOUT_S
    from ..bench.trial_process import TrialSettings

    if args.eval_every is not None:
        raise AccelError("--eval-every is for recipes: a script evaluates when it does, and logs it with eng.log.")
    if args.target:
        from ..bench.target import parse_target

        parse_target(args.target, any_metric=True)  # a malformed target fails now, not in every trial
    trial_steps(args, BENCH_STEPS)
    plan_rounds(args)
    check_trial_options(args)
    timeout = args.timeout or SCRIPT_TIMEOUT_S  # a script trains as long as it likes: a trial must not
    return TrialSettings(
        args.steps,
        args.warmup,
        timeout,
        args.warm_cache,
        args.target,
        sync=args.sync,
        metric_patterns=tuple(args.metric_pattern),
        run_steps=args.run_steps,
        window=args.window,
    )


AA_VARIABLE = "ACCEL_AA"


def as_aa(args: argparse.Namespace, vary: str) -> None:
    """--aa: the subject against itself, as a --vary of something it never reads; it plans its rounds from the
    noise like any bench."""
    if not args.aa:
        return
    if args.ablate or args.vary or args.only:
        raise AccelError("--aa benches the subject against itself: leave out --ablate, --vary and --only.")
    args.vary = [vary]


def finish(report, out: Path, aa: bool = False) -> int:
    """Print the report's folder and summary; the exit code: 130 interrupted, 2 when a trial showed that the rest
    would fail the same way (they were not run), 1 when every trial failed."""
    from ..bench.report import summary_text

    if aa and not report.stopped:
        from ..bench.noise import noise_lines

        print("\n".join(noise_lines(report, out)), file=sys.stderr)
    print(out)
    if report.stopped:  # no table: one trial ran, to find that none could
        print(f"error: {report.stopped}", file=sys.stderr)
        return 2
    print(summary_text(report))
    if report.interrupted:
        return 130
    if not any(v.ok_trials for v in report.variants):  # a report of failures only is not a measurement
        print(f"error: {_all_failed(report, out)}", file=sys.stderr)
        return 1
    return 0


def _all_failed(report, out: Path) -> str:
    from ..bench.report import failed_lines

    failed = failed_lines(report)
    first = failed[0] if failed else "no trial ran"
    return (
        f"every trial failed ({len(failed)} of {len(failed)}), so nothing was measured; each trial's log is under "
        f"{out / 'trials'}. The first: {first}"
    )


def bench_script(args: argparse.Namespace) -> int:
    """`accel bench [OPTIONS] -- python train.py ARGS`: the same report, every trial a fresh process of the script."""
    from ..bench.script import plan_script, run_script_bench, script_name
    from ..io import default_out
    from ..runs.rundir import check_results_out

    if not args.user_script:
        raise AccelError("no script after `--`: give its command, e.g. `accel bench --ablate -- python train.py`.")
    if args.recipe is not None:
        raise AccelError(f"give a recipe or a script, not both: `{args.recipe}` and `{' '.join(args.user_script)}`.")
    as_aa(args, f"env:{AA_VARIABLE}=1,2")  # a variable the script never reads
    settings = script_settings(args)
    out = Path(args.out) if args.out else default_out(script_name(args.user_script), kind="bench")
    if not args.list:
        check_results_out(out, "bench")  # before the probe, which runs the script until it creates its engine
    plan = plan_script(args.user_script, args.overrides, args.ablate, args.vary, args.only, args.timeout)
    if args.list:
        print(plan.listed())
        return 0
    with hold(out):
        report, _ = run_script_bench(plan, out, settings, args.rounds, command=shlex.join(["accel", *args.argv]))
    return finish(report, out, args.aa)


# the rounds a bench runs unless --trials fixes them: the budget ends a bench that cannot decide; the most rounds
# only bounds its report (a forked script trial of a 5 ms-step loop takes 1.5 s: 100 rounds of two fit in 5 minutes)
PILOT_TRIALS, MAX_TRIALS, BENCH_BUDGET = 3, 100, "5m"


def add_round_options(parser: argparse.ArgumentParser) -> None:
    """How many rounds a bench runs: --trials fixes them; by default the bench adds rounds until it decides."""
    parser.add_argument(
        "--resolution",
        type=resolution_share,
        default=None,
        metavar="PERCENT",
        help="the smallest change of samples/s a verdict must resolve (default 3%%, or --fail-if-slower's share): "
        "undecided comparisons get more rounds, up to --max-trials and --budget, unless --trials fixes the count",
    )
    parser.add_argument(
        "--max-trials",
        type=positive_int,
        default=MAX_TRIALS,
        metavar="N",
        help=f"at most this many trials a variant when adding rounds (default {MAX_TRIALS})",
    )
    parser.add_argument(
        "--budget",
        type=parse_duration,
        default=parse_duration(BENCH_BUDGET),
        metavar="DURATION",
        help=f"no rounds added past this wall time, the first ones included (default {BENCH_BUDGET})",
    )


def plan_rounds(args: argparse.Namespace) -> None:
    """`args.rounds` from the options: a fixed design when --trials was given, else a pilot then looks."""
    from ..bench.decide import RESOLUTION, Rounds
    from ..bench.rev_compare import parse_share as gate_share

    allowed = getattr(args, "fail_if_slower", None)
    gate = gate_share(allowed) if allowed else None  # its own message for a bad share
    resolution = args.resolution or gate or RESOLUTION  # a 0% gate keeps the default resolution
    if args.trials is not None:
        args.rounds = Rounds(args.trials, args.trials, 0.0, resolution, gate)
        return
    args.trials = PILOT_TRIALS
    args.rounds = Rounds(PILOT_TRIALS, max(args.max_trials, PILOT_TRIALS), args.budget, resolution, gate)


def resolution_share(text: str) -> float:
    """--resolution: `3%` or `3` as 0.03, above 0 (the gate's reading of a share, as an option's type)."""
    from ..bench.rev_compare import parse_share

    try:
        share = parse_share(text)
    except AccelError as err:
        raise argparse.ArgumentTypeError(str(err).replace("--fail-if-slower", "--resolution")) from None
    if share == 0:
        raise argparse.ArgumentTypeError("--resolution 0%: give a change a verdict can resolve, e.g. 3% or 5%")
    return share
