"""Speed-ups, one module each, registered under the name a recipe uses in `speedups:` (the rule that decides which
of a run's speed-ups run: conflicts.py)."""

from __future__ import annotations

import importlib
import pkgutil

from ..registry import SPEEDUPS
from .base import Candidate, Context, Phase, RunFacts, Speedup, SpeedupConfig
from .conflicts import precision_of, refusals, refuse, resolve, setup_order, skipped

# Every module in this package registers its speed-up on import: adding a file is all it takes.
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "conflicts"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "Candidate",
    "Context",
    "Phase",
    "RunFacts",
    "Speedup",
    "SpeedupConfig",
    "SPEEDUPS",
    "from_configs",
    "precision_of",
    "refusals",
    "refuse",
    "resolve",
    "setup_order",
    "skipped",
]


def from_configs(configs: dict[str, SpeedupConfig]) -> list[Speedup]:
    """The enabled speed-ups of a recipe's `speedups:` section; a disabled one is simply not built."""
    return [SPEEDUPS.get(name)(cfg) for name, cfg in configs.items() if cfg.enabled]
