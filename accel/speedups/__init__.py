"""Speed-ups, one module each, registered under the name a recipe uses in `speedups:` (the rule that decides which
of a run's speed-ups run: conflicts.py)."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from ..registry import SPEEDUPS
from .base import Candidate, Context, Phase, RunFacts, Speedup, SpeedupConfig, registered
from .conflicts import precision_of, refusals, refuse, resolve, setup_order, skipped

# Every module in this package registers its speed-up on import: adding a file is all it takes.
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "conflicts"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "registered",
    "Candidate",
    "Context",
    "Phase",
    "RunFacts",
    "Speedup",
    "SpeedupConfig",
    "SPEEDUPS",
    "compile_figures",
    "from_configs",
    "precision_of",
    "refusals",
    "refuse",
    "resolve",
    "setup_order",
    "skipped",
]


# A bench trial's torch.compile figures (its record's keys) and the metric of a `reports_compile` speed-up they read.
COMPILE_FIGURES = {"compile_s": "seconds", "graph_breaks": "graph_breaks", "recompiles": "recompiles"}


def compile_figures(speedup_metrics: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What torch.compile cost a run, from the metrics of the speed-up that reports it (`reports_compile`; dynamo's
    own compile seconds, apart from the first step's run time), or {} when none compiled."""
    compiled = next(
        (m for name, m in speedup_metrics.items() if m and name in SPEEDUPS and SPEEDUPS.get(name).reports_compile),
        None,
    )
    return {key: compiled.get(metric) for key, metric in COMPILE_FIGURES.items()} if compiled else {}


def from_configs(configs: dict[str, SpeedupConfig]) -> list[Speedup]:
    """The enabled speed-ups of a recipe's `speedups:` section; a disabled one is simply not built."""
    return [SPEEDUPS.get(name)(cfg) for name, cfg in configs.items() if cfg.enabled]
