"""Models by name: accel's own (small vision models, a GPT), `torchvision:NAME`, `timm:NAME`, Hugging Face
builders, or any `package.module:callable` (a recipe's `model:` section: accel.models.build).

The names below load on first use: a speed-up that reads a model's structure (accel.models.blocks) imports this
package without the builders, so `import accel.train.trainer` loads no model module.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "ModelConfig": "build",
    "WeightsConfig": "weights",
    "build_model": "build",
    "GPT": "gpt",
    "resnet18_cifar": "vision",
    "small_cnn": "vision",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'accel.models' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
