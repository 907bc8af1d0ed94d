"""`accel profile`: the step's anatomy, the top operators, memory, advice that names the fix, and a Chrome trace."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..errors import AccelError
from .options import add_sets
from .train import EXIT_CODES


def add(commands) -> None:
    parser = commands.add_parser(
        "profile",
        help="profile a few training steps of a recipe or of your own script (`-- python train.py ARGS`): where "
        "the step's time and memory go, and what to do",
    )
    parser.add_argument(
        "recipe",
        nargs="?",
        help="path to a recipe YAML file, or a shipped recipe's name; or, after all options, your script: "
        "`-- python train.py ARGS` (its accel.Engine profiles its own steps; docs/own-loop.md)",
    )
    add_sets(parser)
    parser.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="unprofiled steps first: compiling, allocator, kernel choice (default 2)",
    )
    parser.add_argument("--steps", type=int, default=3, help="profiled optimizer steps (default 3)")
    parser.add_argument("--rows", type=int, default=15, help="ops listed per clock (default 15)")
    parser.add_argument(
        "--sync-debug", action="store_true", help="CUDA: warn, with a stack, of each host-device sync in the steps"
    )
    parser.add_argument(
        "--out",
        help="folder for profile.json/.md/.html and trace.json.gz (default: runs/profile-<name>-<timestamp>)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..config.recipe import load_recipe
    from ..io import default_out
    from ..profile import profile_recipe, profile_window, step_overrides
    from ..profile.report import print_report
    from ..runs.rundir import check_results_out

    if args.user_script is not None or args.recipe is None:
        return profile_script(args)
    recipe = load_recipe(args.recipe, [*args.overrides, *step_overrides(args.warmup, args.steps)])
    out = Path(args.out) if args.out else default_out(recipe.name, kind="profile")
    check_results_out(out, "profile")
    command = shlex.join(["accel", *args.argv])
    profiler = profile_window(
        args.warmup, args.steps, out, command, args.recipe, args.rows, args.sync_debug, args.overrides
    )
    report = profile_recipe(recipe, profiler)
    if report is None:
        print(f"interrupted before the profiled steps began: nothing written to {out}", file=sys.stderr)
        return 130
    print_report(report, out)
    return EXIT_CODES[report["status"]]  # as `accel train` ends: 3 diverged, 130 interrupted


def profile_script(args: argparse.Namespace) -> int:
    """`accel profile [OPTIONS] -- python train.py ARGS`: the same report, from the script's own engine."""
    from ..bench.script import ScriptLaunch, probe, script_name, uses_engine
    from ..io import default_out
    from ..profile.report import print_report
    from ..profile.script import Window, profile_script
    from ..profile.steps import check_window
    from ..runs.rundir import check_results_out

    if not args.user_script:
        raise AccelError(
            "accel profile needs a recipe, or a script after the options: `accel profile -- python train.py ARGS`."
        )
    if args.recipe is not None:
        raise AccelError(f"give a recipe or a script, not both: `{args.recipe}` and `{shlex.join(args.user_script)}`.")
    check_window(args.warmup, args.steps)
    out = Path(args.out) if args.out else default_out(script_name(args.user_script), kind="profile")
    check_results_out(out, "profile")
    launch = ScriptLaunch(tuple(args.user_script), tuple(args.overrides))
    given = probe(args.user_script, args.overrides)  # no training, or a bad --set: one message, before any work
    if args.overrides and not uses_engine(given):
        raise AccelError(
            f"--set {args.overrides[0]}: an accel.Engine setting, and `{shlex.join(args.user_script)}` creates no "
            "accel.Engine: profile it as it runs (without --set), or change its own options on its command line."
        )
    if args.sync_debug and not given["resolved_device"].startswith("cuda"):
        raise AccelError("--sync-debug needs CUDA: it reports host-device syncs, and this script runs on the CPU.")
    command = shlex.join(["accel", *args.argv])
    window = Window(
        str(out.resolve()),
        args.warmup,
        args.steps,
        args.rows,
        args.sync_debug,
        command,
        args.user_script,
        args.overrides,
    )
    try:
        report = profile_script(window, launch.accel_set())
    except KeyboardInterrupt:
        print(f"interrupted: no profile written to {out}", file=sys.stderr)
        return 130
    print_report(report, out)
    return 0
