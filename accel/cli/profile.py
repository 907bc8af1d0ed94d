"""`accel profile`: the step's anatomy, the top operators, memory, advice that names the fix, and a Chrome trace."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from .options import add_sets
from .train import EXIT_CODES


def add(commands) -> None:
    parser = commands.add_parser(
        "profile",
        help="profile a few training steps of a recipe: where the step's time and memory go, and what to do",
    )
    parser.add_argument("recipe", help="path to a recipe YAML file, or a shipped recipe's name")
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
    from ..io import default_out
    from ..profile import profile_recipe, profile_window, step_overrides
    from ..profile.report import print_report
    from ..recipe import load_recipe
    from ..rundir import check_results_out

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
