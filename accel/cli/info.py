"""`accel recipes`, `accel speedups`, `accel doctor`: what is shipped, what runs here, what is wrong here."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from .options import add_sets

SPEEDUPS_DIR = Path(__file__).resolve().parents[1] / "speedups"


def add(commands) -> None:
    commands.add_parser("recipes", help="list the shipped recipes").set_defaults(run=recipes)
    speedups_parser = commands.add_parser("speedups", help="list the speed-ups (--here: whether each runs here)")
    speedups_parser.add_argument(
        "--here", action="store_true", help="also check whether each can run on this machine (imports torch: seconds)"
    )
    speedups_parser.set_defaults(run=speedups)
    doctor_parser = commands.add_parser("doctor", help="versions, devices, threads, backends and known speed traps")
    doctor_parser.add_argument("recipe", nargs="?", help="also check this recipe's loader and speed-up settings")
    add_sets(doctor_parser)
    doctor_parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    doctor_parser.set_defaults(run=doctor)


def recipes(args: argparse.Namespace) -> int:
    from ..shipped import RECIPES_DIR, recipe_names

    for name in recipe_names():
        text = (RECIPES_DIR / f"{name}.yaml").read_text()
        first = next((line for line in text.splitlines() if line.startswith("#")), "#")
        print(f"{name:24s} {first.lstrip('# ').strip()}")
    print(f"\nTrain one by name from any folder: accel train quickstart (the files: {RECIPES_DIR})")
    return 0


def catalogue() -> dict[str, str]:
    """Each speed-up's recipe name and the first line of its class docstring, read from the source of
    accel/speedups without importing it: importing the speed-ups imports torch, seconds on a small machine.
    `accel speedups --here` imports them anyway and lists the registry itself."""
    found = {}
    for path in sorted(SPEEDUPS_DIR.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            for name in filter(None, map(_registered_name, getattr(node, "decorator_list", []))):
                found[name] = ((ast.get_docstring(node) or "").strip().splitlines() or [""])[0]
    return dict(sorted(found.items()))


def _registered_name(decorator: ast.expr) -> str | None:
    """ "amp" for a decorator written `@SPEEDUPS.register("amp")`, else None."""
    call = decorator if isinstance(decorator, ast.Call) else None
    if call is None or not isinstance(call.func, ast.Attribute) or call.func.attr != "register":
        return None
    if getattr(call.func.value, "id", None) != "SPEEDUPS" or not call.args:
        return None
    return getattr(call.args[0], "value", None)


def speedups(args: argparse.Namespace) -> int:
    listed = _registered() if args.here else {name: (doc, None) for name, doc in catalogue().items()}
    for name, (doc, reason) in listed.items():
        status = ""
        if args.here:
            status = "  [available]" if reason is None else f"  [unavailable here: {reason}]"
        print(f"{name:24s} {doc}{status}")
    if not args.here:
        print("\nWhether each can run on this machine: accel speedups --here")
    return 0


def _registered() -> dict[str, tuple[str, str | None]]:
    """Each registered speed-up (a user's own too, once imported): its docstring's first line and why it cannot
    run on this machine's default device (None: it can)."""
    from .. import builtins  # noqa: F401
    from ..devices import resolve_device
    from ..registry import SPEEDUPS
    from ..speedups import Context

    context = Context(resolve_device("auto"))
    return {
        name: ((cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else "", cls().conflict(context))
        for name in SPEEDUPS.names()
        for cls in [SPEEDUPS.get(name)]
    }


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
