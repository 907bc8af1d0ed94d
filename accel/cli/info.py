"""`accel recipes`, `accel speedups`, `accel doctor`: what is shipped, what runs here, what is wrong here."""
from __future__ import annotations

import argparse
from pathlib import Path

from .options import add_sets

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"


def add(commands) -> None:
    commands.add_parser("recipes", help="list the shipped recipes").set_defaults(run=recipes)
    commands.add_parser("speedups", help="list the speed-ups and whether each can run here").set_defaults(
        run=speedups)
    doctor_parser = commands.add_parser("doctor", help="versions, devices, threads, backends and known speed traps")
    doctor_parser.add_argument("recipe", nargs="?", help="also check this recipe's loader and speed-up settings")
    add_sets(doctor_parser)
    doctor_parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    doctor_parser.set_defaults(run=doctor)


def recipes(args: argparse.Namespace) -> int:
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        first = next((line for line in path.read_text().splitlines() if line.startswith("#")), "#")
        print(f"{path.relative_to(RECIPES_DIR.parent)}  {first.lstrip('# ').strip()}")
    return 0


def speedups(args: argparse.Namespace) -> int:
    from .. import builtins  # noqa: F401
    from ..devices import resolve_device
    from ..registry import SPEEDUPS

    device = resolve_device("auto")
    for name in SPEEDUPS.names():
        speedup = SPEEDUPS.get(name)()
        reason = speedup.unavailable(device)
        doc = (type(speedup).__doc__ or "").strip().splitlines()[0] if type(speedup).__doc__ else ""
        status = "available" if reason is None else f"unavailable here: {reason}"
        print(f"{name:14s} {doc}  [{status}]")
    return 0


def doctor(args: argparse.Namespace) -> int:
    import json

    from ..doctor import collect, render
    from ..recipe import load_recipe

    recipe = load_recipe(args.recipe, args.overrides) if args.recipe else None
    info = collect(recipe)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        render(info)
    return 0
