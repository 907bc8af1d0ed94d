"""`accel` on the command line. Thin: parse, load and validate the recipe, call the library.

One module per group of commands; each adds its subcommands with `add(commands)` and binds the function that
runs them through `set_defaults(run=...)`.
"""

from __future__ import annotations

import argparse
import logging
import sys

from ..errors import AccelError, say_error, user_message
from . import bench, bench_data, cache, cluster, export, history, info, outputs, profile, run, script_args, train, tune

GROUPS = (
    train,
    run,
    cluster,
    info,
    bench,
    tune,
    history,
    bench_data,
    profile,
    cache,
    export,
)  # in the order `accel --help` lists them


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accel", description="Faster PyTorch training, with the proof.")
    commands = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    mine, script = script_args.split(given)  # a user's script and its own options, apart from accel's
    args = _parser().parse_args(mine)
    args.argv, args.user_script = given, script  # argv: for reports that say which command made them
    logging.basicConfig(level=logging.INFO, format="accel: %(message)s", stream=sys.stderr)
    try:
        script_args.check_found(args.command, getattr(args, "recipe", None), script)
        outputs.check_apart(args)
        return args.run(args)
    except AccelError as err:
        say_error(user_message(err))
        return 2
    except KeyboardInterrupt:  # before a command's own handling (a script's probe, a recipe's loading)
        print("interrupted", file=sys.stderr)
        return 130
