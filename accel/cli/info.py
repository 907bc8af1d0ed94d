"""`accel recipes`, `accel speedups`, `accel doctor`: what is shipped, what runs here, what is wrong here."""

from __future__ import annotations

import argparse

from .options import add_sets


def add(commands) -> None:
    commands.add_parser("recipes", help="list the shipped recipes").set_defaults(run=recipes)
    commands.add_parser("speedups", help="list the speed-ups and whether each can run here").set_defaults(run=speedups)
    doctor_parser = commands.add_parser("doctor", help="versions, devices, threads, backends and known speed traps")
    doctor_parser.add_argument("recipe", nargs="?", help="also check this recipe's loader and speed-up settings")
    add_sets(doctor_parser)
    doctor_parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    doctor_parser.set_defaults(run=doctor)


def recipes(args: argparse.Namespace) -> int:
    from ..config.shipped import RECIPES_DIR, recipe_names

    for name in recipe_names():
        text = (RECIPES_DIR / f"{name}.yaml").read_text()
        first = next((line for line in text.splitlines() if line.startswith("#")), "#")
        print(f"{name:24s} {first.lstrip('# ').strip()}")
    print(f"\nTrain one by name from any folder: accel train quickstart (the files: {RECIPES_DIR})")
    return 0


def speedups(args: argparse.Namespace) -> int:
    """Every registered speed-up, a user's own included once its module is imported: the registry is the one
    list (reading it imports torch, seconds on a small machine; `accel --help` and `accel recipes` do not).
    Importing accel.speedups registers the built-in ones, without the models and datasets accel.config.builtins adds."""
    from ..devices import resolve_device
    from ..registry import SPEEDUPS
    from ..speedups import Context

    context = Context(resolve_device("auto"))
    for name in SPEEDUPS.names():
        cls = SPEEDUPS.get(name)
        reason = cls().conflict(context)
        status = "available" if reason is None else f"unavailable here: {reason}"
        print(f"{name:24s} {_first_sentence(cls.__doc__)}  [{status}]")
    return 0


def _first_sentence(text: str | None) -> str:
    """A description's first sentence, whole where it wraps onto more lines (a cut one can read as another)."""
    paragraph = " ".join((text or "").strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def doctor(args: argparse.Namespace) -> int:
    import json

    from ..config.recipe import load_recipe
    from ..measure.doctor import collect, render

    recipe = load_recipe(args.recipe, args.overrides) if args.recipe else None
    info = collect(recipe)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        render(info)
    return 0
