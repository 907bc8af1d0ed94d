"""A user's script on the command line: `accel bench|profile|run [OPTIONS] -- python train.py ARGS`, or without
the `--`, `accel bench [OPTIONS] train.py ARGS`. Everything from the script on is the script's, so its own options
(`--lr`, even `--steps`) never reach accel's parser; accel's options come before it."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import AccelError

SCRIPT_COMMANDS = ("bench", "tune", "profile", "run")


def split(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """(accel's arguments, the script's command line or None): after `--`, or from the first `.py` file on."""
    if not argv or argv[0] not in SCRIPT_COMMANDS:
        return argv, None
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], _command(argv[cut + 1 :])
    for i, token in enumerate(argv[1:], start=1):
        if _is_script(token):
            return argv[:i], _command(argv[i:])
    return argv, None


def _is_script(token: str) -> bool:
    return token.endswith(".py") and not token.startswith("-") and "=" not in token and Path(token).is_file()


def _command(tokens: list[str]) -> list[str]:
    """The command as given; a bare `train.py` runs under this Python, the one accel is installed in."""
    if tokens and tokens[0].endswith(".py"):
        return [sys.executable, *tokens]
    return tokens


def check_found(command: str, recipe: str | None, script: list[str] | None) -> None:
    """Refuse a script that is not there as a script: without `--` its name was taken for a recipe not found, and
    after `--` the interpreter said so only once a probe of it ran."""
    if command not in SCRIPT_COMMANDS:
        return
    named = _script_file(script) if script else recipe if recipe and recipe.endswith(".py") else None
    if named is not None and not Path(named).is_file():
        where = "" if Path(named).is_absolute() else f" (looked in {Path.cwd()})"
        raise AccelError(f"script not found: {named}{where}.")


def _script_file(command: list[str]) -> str | None:
    """The .py file a command runs: the command itself (`./train.py`), or Python's script argument (`python -u
    train.py`); None for anything else (`python -m module`, `torchrun ...`), which its own program reports."""
    if command[0].endswith(".py"):
        return command[0]
    if not Path(command[0]).name.startswith("python"):
        return None
    for token in command[1:]:
        if token.startswith(("-m", "-c")):
            return None
        if not token.startswith("-"):
            return token if token.endswith(".py") else None
    return None
