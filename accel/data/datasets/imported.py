"""A user's own dataset, named by import string: `dataset: {name: "my_pkg.data:build", args: {...}}`.

The function returns `accel.data.Splits` (train and validation sets, the class count or vocabulary); it receives
`args`, plus `seed` and `val_fraction` where its signature names them. Its samples may be anything the task and
the model take (dict samples for Hugging Face models with `task: model_loss`); the loader collates them.
"""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import Field

from ...errors import DataError
from ...registry import DATASETS, IMPORTED, import_attribute
from ..splits import Splits
from .base import DatasetConfig


@DATASETS.register(IMPORTED)
class ImportedDataset:
    class Config(DatasetConfig):
        name: str = Field(pattern=r"^[\w.]+:[\w.]+$", description="`package.module:function` returning Splits")
        args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the function")

    @staticmethod
    def build(cfg: ImportedDataset.Config, seed: int) -> Splits:
        build = import_attribute(cfg.name)
        offered = {"seed": seed, "val_fraction": cfg.val_fraction}
        try:
            named = inspect.signature(build).parameters
        except (TypeError, ValueError):
            named = {}
        splits = build(**{key: value for key, value in offered.items() if key in named}, **cfg.args)
        if not isinstance(splits, Splits):
            raise DataError(
                f"dataset `{cfg.name}` returned {type(splits).__name__}; it must return "
                "accel.data.Splits(train, val, num_classes=..., sample_shape=...)"
            )
        return splits
