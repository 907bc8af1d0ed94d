"""When two sets of overrides make the same configuration, so tune measures it once."""

from __future__ import annotations

import json
from typing import Any

from ...recipe import Recipe
from ..knobs import lookup
from ..runner import resolve_variant
from ..variants import Variant


def effective(base: Recipe, overrides: dict[str, Any]) -> dict[str, Any]:
    """The overrides that change the recipe (one that repeats the recipe's value, or its absence, does not)."""
    plain = base.dump()
    return {k: v for k, v in overrides.items() if lookup(plain, k) != v}


def config_key(base: Recipe, overrides: dict[str, Any]) -> str:
    """The configuration the overrides make, however they say it: an override equal to the recipe's value, or a
    speed-up turned off rather than absent, changes nothing, and such configurations share measurements."""
    data = resolve_variant(base, Variant("key", effective(base, overrides))).dump()
    data["speedups"] = {name: cfg for name, cfg in data["speedups"].items() if cfg.get("enabled", True)}
    return json.dumps(data, sort_keys=True, default=str)


def config_keys(base: Recipe, variants: list[Variant]) -> dict[str, str]:
    """Variant name -> the configuration it makes: variants equal in effect share one, and run once."""
    return {v.name: config_key(base, v.overrides) for v in variants}
