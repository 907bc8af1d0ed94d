"""A user's own dataset named by import string in a recipe."""

from __future__ import annotations

import pytest

from accel.config.recipe import validate_recipe
from accel.errors import AccelError
from accel.registry import DATASETS


def not_splits(seed: int):
    return [seed]


def test_the_function_gets_seed_and_val_fraction_where_it_names_them_and_args():
    cfg = DATASETS.get("tests.compat.data:token_classes").Config(
        name="tests.compat.data:token_classes", val_fraction=0.5, args={"num_samples": 20}
    )
    splits = DATASETS.get(cfg.name).build(cfg, seed=3)
    assert (len(splits.train), len(splits.val), splits.num_classes) == (10, 10, 2)
    assert not splits.images and set(splits.train[0]) == {"input_ids", "attention_mask", "labels"}


def test_a_function_that_returns_something_else_is_named():
    cfg = DATASETS.get("x:y").Config(name="tests.data.test_imported:not_splits")
    with pytest.raises(
        AccelError,
        match=r"dataset `tests.data.test_imported:not_splits` returned list; it must "
        r"return accel.data.Splits",
    ):
        DATASETS.get(cfg.name).build(cfg, seed=0)


def test_a_misspelt_option_is_refused_in_the_recipe(tiny):
    tiny["data"]["dataset"] = {"name": "tests.compat.data:token_classes", "arg": {"num_samples": 20}}
    with pytest.raises(AccelError, match=r"data\.dataset\.arg.*did you mean `args`"):
        validate_recipe(tiny)
