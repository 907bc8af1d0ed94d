"""What a trial's zygote may import before the script runs (accel/trial/zygote.py), read by the probe: the
libraries the script had imported by its first optimizer step, while its environment was still the one it started
with. Imported earlier, in a process whose environment is the trial's, they are what the script's own imports would
have made; a script that sets a variable before importing (`OMP_NUM_THREADS` before torch) gets nothing preloaded
from that point on. Only libraries from the interpreter's own trees (the standard library, site-packages), never the
script's own modules or a folder it put on sys.path. Torch-free."""

from __future__ import annotations

import os
import sys
import sysconfig

OWN = "ACCEL_"  # accel's own variables differ between the probe and a trial: not the script's environment
SKIPPED = {"__main__", "sitecustomize", "usercustomize", "accel"}

_start: dict[str, str] | None = None
_at_torch: list[str] | None = None  # the modules loaded when torch was, where the environment was unchanged then


def _environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith(OWN)}


def mark_start() -> None:
    """At the process's start (the trial joins): the environment the script starts with."""
    global _start
    _start = _environment()


def mark_torch() -> None:
    """torch was imported: what was loaded by then counts where the environment was still the start's."""
    global _at_torch
    if _start is not None and _environment() == _start:
        _at_torch = list(sys.modules)


def preloadable() -> list[str]:
    """At the first optimizer step: the library modules a zygote may import for this script, in the order it
    imported them, submodules too (`torch._dynamo`, which torch imports at the first optimizer step); empty: none,
    the trials start as fresh processes."""
    if _start is None:
        return []
    loaded = list(sys.modules) if _environment() == _start else (_at_torch or [])
    trees = _interpreter_trees()
    return [name for name in loaded if name.split(".")[0] not in SKIPPED and _within(name, trees)]


def _interpreter_trees() -> tuple[str, ...]:
    """The standard library's and site-packages' folders (a venv inside the script's folder is still a library's)."""
    paths = sysconfig.get_paths()
    trees = {os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    return tuple(os.path.join(tree, "") for tree in trees)


def _within(name: str, trees: tuple[str, ...]) -> bool:
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    return bool(path) and os.path.realpath(path).startswith(trees)
