"""A user's script on the command line: `accel bench|profile|run [OPTIONS] -- python train.py ARGS`, or without
the `--`, `accel bench [OPTIONS] train.py ARGS`. Everything from the script on is the script's, so its own options
(`--lr`, even `--steps`) never reach accel's parser; accel's options come before it."""

from __future__ import annotations

import sys
from pathlib import Path

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
