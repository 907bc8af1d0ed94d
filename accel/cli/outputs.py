"""What a command writes against what it reads: an output that names one of the command's inputs is refused
before anything runs (`accel history H.jsonl --html H.jsonl` once replaced the history with its page).

Each command declares its outputs and its inputs by their options' names (`declare`); a script's command line
(`-- python train.py ARGS`) is an input wherever a token of it names a file or folder that exists.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import AccelError


def declare(parser: argparse.ArgumentParser, writes: tuple[str, ...], reads: tuple[str, ...] = ()) -> None:
    """The options (argparse's dests) that name what the command writes, and those that name what it reads."""
    parser.set_defaults(writes=writes, reads=reads)


def check_apart(args: argparse.Namespace) -> None:
    """Refuse an output that is one of the inputs, or another output: the same path by any spelling or link."""
    outputs = [(dest, getattr(args, dest, None)) for dest in getattr(args, "writes", ())]
    outputs = [(f"--{dest.replace('_', '-')}", Path(value)) for dest, value in outputs if value]
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
    for dest in getattr(args, "reads", ()):
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


def _same(output: Path, given: Path) -> bool:
    if output.resolve() == given.resolve():
        return True
    try:
        return os.path.samefile(output, given)  # a hard link
    except OSError:  # either is missing
        return False
