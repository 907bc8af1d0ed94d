"""`accel profile`: where a recipe's training step goes, op by op, and a Chrome trace of the steps."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from .options import add_sets


def add(commands) -> None:
    parser = commands.add_parser(
        "profile", help="profile a few training steps of a recipe: ops by self time per step, and a Chrome trace"
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
        "--out", help="folder for trace.json.gz and profile.json (default: runs/profile-<name>-<timestamp>)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..devices import environment, resolve_device
    from ..io import default_out, strict_json, write_atomic
    from ..profile import op_rows, profile_recipe, render, write_trace
    from ..profile.steps import step_overrides
    from ..recipe import load_recipe
    from ..rundir import check_results_out

    recipe = load_recipe(args.recipe, [*args.overrides, *step_overrides(args.warmup, args.steps)])
    out = Path(args.out) if args.out else default_out(recipe.name, kind="profile")
    check_results_out(out, "profile")
    profiled = profile_recipe(recipe, args.warmup, args.steps, args.sync_debug)
    tables = op_rows(profiled, args.rows)
    print(render(tables))
    trace = write_trace(profiled, out)
    report = {
        "command": shlex.join(["accel", *args.argv]),
        "warmup": args.warmup,
        "steps": args.steps,
        "ops": tables,
        "trace": trace.name,
        "env": environment(resolve_device(recipe.device)),
    }
    write_atomic(out / "profile.json", strict_json(report, indent=1) + "\n")
    print(f"\n{trace} ({trace.stat().st_size / 1e6:.2f} MB; open it in https://ui.perfetto.dev)")
    return 0
