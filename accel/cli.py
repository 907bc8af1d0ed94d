"""`accel` on the command line. Thin: parse, load and validate the recipe, call the library."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .errors import AccelError

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accel", description="Faster PyTorch training, with the proof.")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a recipe into a run directory")
    train.add_argument("recipe", help="path to a recipe YAML file")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a recipe key, e.g. --set optim.lr=1e-3 (repeatable)")
    train.add_argument("--out", help="run directory (default: runs/<name>-<timestamp>)")
    train.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.pt")

    commands.add_parser("recipes", help="list the shipped recipes")
    commands.add_parser("speedups", help="list the speed-ups and whether each can run here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="accel: %(message)s", stream=sys.stderr)
    try:
        return COMMANDS[args.command](args)
    except AccelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _train(args: argparse.Namespace) -> int:
    from .recipe import load_recipe
    from .run import run_recipe

    if args.resume and not args.out:
        raise AccelError("--resume needs --out RUN_DIR: the run directory whose checkpoints/last.pt to continue.")
    recipe = load_recipe(args.recipe, args.overrides)
    summary = run_recipe(recipe, args.out, resume=args.resume)
    print(summary["run_dir"])
    if summary["status"] == "interrupted":
        print(f"interrupted; continue with: accel train {args.recipe} --out {summary['run_dir']} --resume",
              file=sys.stderr)
        return 130
    return 0


def _recipes(args: argparse.Namespace) -> int:
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        first = next((line for line in path.read_text().splitlines() if line.startswith("#")), "#")
        print(f"{path.relative_to(RECIPES_DIR.parent)}  {first.lstrip('# ').strip()}")
    return 0


def _speedups(args: argparse.Namespace) -> int:
    from . import builtins  # noqa: F401
    from .devices import resolve_device
    from .registry import SPEEDUPS

    device = resolve_device("auto")
    for name in SPEEDUPS.names():
        speedup = SPEEDUPS.get(name)()
        reason = speedup.unavailable(device)
        doc = (type(speedup).__doc__ or "").strip().splitlines()[0] if type(speedup).__doc__ else ""
        status = "available" if reason is None else f"unavailable here: {reason}"
        print(f"{name:14s} {doc}  [{status}]")
    return 0


COMMANDS = {"train": _train, "recipes": _recipes, "speedups": _speedups}

if __name__ == "__main__":
    sys.exit(main())
