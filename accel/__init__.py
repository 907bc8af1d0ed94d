"""accel: composable PyTorch training speed-ups, driven by YAML recipes or a hand-written loop (`accel.Engine`),
with A/B speed reports.

The names below load on first use, so `import accel.train.trainer` (bring your own model and data) does not import
the recipe machinery with every model and dataset it can name.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "AccelError": "errors",
    "Engine": "engine.own_loop",
    "Recipe": "config.recipe",
    "load_recipe": "config.recipe",
    "build_trainer": "train.run",
    "run_recipe": "train.run",
    "Trainer": "train.trainer",
    "speedups": None,
    "tasks": None,
}

__all__ = sorted(_WHERE)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'accel' has no attribute {name!r}")
    module = importlib.import_module(f".{_WHERE[name] or name}", __name__)
    return module if _WHERE[name] is None else getattr(module, name)
