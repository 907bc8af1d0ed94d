"""Name -> builder tables for models, datasets, optimizers, schedulers, losses and speed-ups.

A registry is filled by decorators in the modules that define the builders; `Registry.get` turns an
unknown name into an error that lists the valid ones.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
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
            "importable (installed, or on PYTHONPATH)."
        ) from None
    return value
