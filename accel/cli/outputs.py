"""What a command writes against what it reads: an output that names one of the command's inputs is refused
before anything runs (`accel history H.jsonl --html H.jsonl` once replaced the history with its page).

Each command's outputs and inputs are its options' names (argparse's dests) in `PATHS`; a script's command line
(`-- python train.py ARGS`) is an input wherever a token of it names a file or folder that exists.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import AccelError

# command -> (the options that name what it writes, those that name what it reads); k8s's --out is a folder on the
# cluster's claim, not here
PATHS = {
    "train": (("out",), ("recipe",)),
    "bench": (("out", "history"), ("recipe",)),
    "tune": (("out", "work"), ("recipe",)),
    "profile": (("out",), ("recipe",)),
    "bench-data": (("out",), ("recipe",)),
    "history": (("html",), ("file",)),
    "export": (("out",), ("source",)),
    "slurm": (("out", "script"), ("recipe",)),
    "k8s": (("manifest",), ("recipe",)),
}


def check_apart(args: argparse.Namespace) -> None:
    """Refuse an output that is one of the inputs, or another output: the same path by any spelling or link."""
    writes, _ = PATHS.get(args.command, ((), ()))
    outputs = [(dest, getattr(args, dest, None)) for dest in writes]
    outputs = [(f"--{dest.replace('_', '-')}", str(value)) for dest, value in outputs if value]  # as typed
    if not outputs:  # the recipe is read only where an output could be one of its files
        return
    for i, (flag, output) in enumerate(outputs):
        for other, path in outputs[i + 1 :]:
            if _same(output, path):
                raise AccelError(
                    f"{flag} {output} and {other} {path} name the same path: each output needs its own. Choose "
                    f"another {other}."
                )
    inputs = _inputs(args)
    for flag, output in outputs:
        for what, path in inputs:
            if _same(output, path):
                raise AccelError(
                    f"{flag} {output} names {what} ({path}), which `accel {args.command}` reads: writing there would "
                    f"replace it. Choose another {flag}."
                )


def _inputs(args: argparse.Namespace) -> list[tuple[str, Path]]:
    found = []
    for dest in PATHS[args.command][1]:
        value = getattr(args, dest, None)
        if dest == "recipe" and value:
            found += _recipe(value)
        elif value:
            found.append((f"the {dest}", Path(value)))
    for token in getattr(args, "user_script", None) or ():
        for part in {token, token.partition("=")[2]} - {""}:  # `--data=d.csv` names d.csv
            if os.path.exists(part):  # False, not an error, for a token too long to be a path
                found.append(("a path the script's command names", Path(part)))
    return found


def _recipe(given: str) -> list[tuple[str, Path]]:
    """The recipe file and its `base:` files; none where it cannot be read (the command then says why)."""
    from ..config.recipe_yaml import recipe_files
    from ..config.shipped import find_recipe

    try:
        recipe, *bases = recipe_files(find_recipe(given))
    except (AccelError, OSError, ValueError):
        return []
    return [("the recipe", recipe)] + [("a `base:` file of the recipe", base) for base in bases]


def _same(output: str | Path, given: str | Path) -> bool:
    if Path(output).resolve() == Path(given).resolve():
        return True
    try:
        return os.path.samefile(output, given)  # a hard link
    except OSError:  # either is missing
        return False
