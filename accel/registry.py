"""Name -> builder tables for models, datasets, optimizers, schedulers, losses and speed-ups.

A registry is filled by decorators in the modules that define the builders; `Registry.get` turns an
unknown name into an error that lists the valid ones.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import AccelError, did_you_mean

log = logging.getLogger("accel")


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Any] = {}

    def register(self, name: str) -> Callable[[Any], Any]:
        def add(obj: Any) -> Any:
            if name in self._entries:
                raise ValueError(f"{self.kind} `{name}` is registered twice")
            self._entries[name] = obj
            return obj

        return add

    def get(self, name: str) -> Any:
        if name not in self._entries:
            raise AccelError(
                f"Unknown {self.kind} `{name}`{did_you_mean(name, self._entries)}. "
                f"Valid {self.kind}s: {', '.join(sorted(self._entries))}."
            )
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries


class ImportingRegistry(Registry):
    """Builders by name, and a user's own by import string (`my_pkg.tasks:Segmentation`, `my_pkg.data:build`):
    every import string is served by the entry registered under IMPORTED."""

    def get(self, name: str) -> Any:
        if ":" in name:
            return self._entries[IMPORTED]
        return super().get(name)

    def names(self) -> list[str]:
        return [name for name in super().names() if name != IMPORTED]


IMPORTED = "package.module:attribute"  # the entry that serves every import string
MODELS = Registry("model")
DATASETS = ImportingRegistry("dataset")
OPTIMIZERS = Registry("optimizer")
SCHEDULERS = Registry("scheduler")
LOSSES = Registry("loss")
SPEEDUPS = Registry("speed-up")
TASKS = ImportingRegistry("task")


def is_import_string(name: str) -> bool:
    """`package.module:attribute`: the user's own code, as opposed to a registered name or a library's model
    (`torchvision:NAME`, `timm:NAME`)."""
    from .models.libraries import is_library_model

    return ":" in name and not is_library_model(name)


def add_import_roots(recipe: Path) -> None:
    """Make a module beside the recipe, then one in the current folder, importable by name (`model: {name:
    mymodel:build}`), as `python train.py` finds one beside the script; the `accel` command, unlike `python -m
    accel.cli`, puts neither on sys.path. Appended after the installed packages, so a file there never shadows
    one accel needs; processes started from here (bench trials, torchrun's ranks) get them through PYTHONPATH."""
    roots = [str(recipe.resolve().parent), os.getcwd()]
    sys.path.extend(root for root in roots if root not in sys.path)
    given = [part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part]
    os.environ["PYTHONPATH"] = os.pathsep.join(given + [root for root in roots if root not in given])


_announced: set[tuple[tuple[str, str], ...]] = set()


def announce_user_code(names: dict[str, str]) -> None:
    """Say (once per process) which of a recipe's `names` (what it is -> name) are import strings of user code:
    a recipe is code, to be trusted like a script, and the log names what it imports."""
    key = tuple((name, what) for what, name in names.items() if is_import_string(name))
    if key and key not in _announced:
        _announced.add(key)
        log.info("importing user code: %s", ", ".join(f"{name} ({what})" for name, what in key))


def import_attribute(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        value = importlib.import_module(module_name)
        for part in attr.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as err:
        raise AccelError(
            f"Cannot import `{target}`: {err}. Use `package.module:attribute`, with the package "
            "importable (installed, on PYTHONPATH, or a module beside the recipe or in the current folder)."
        ) from None
    return value
