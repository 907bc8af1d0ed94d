"""What tune measures (its subject: a recipe here, a script in `tune.script`), and when two sets of overrides make
the same configuration, so tune measures it once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ...config.recipe import Recipe
from ..knobs import lookup
from ..plan import resolve_variant, write_recipes
from ..records import Trial
from ..refused import recipe_refusals
from ..trial_process import Launch
from ..variants import Variant


class Subject(Protocol):
    """What the search asks of the thing it tunes."""

    given: str  # the final check's name for the configuration as given

    def plain(self) -> dict[str, Any]:
        """The settings as given, as nested data (`knobs.lookup` reads dotted keys from it)."""

    def effective(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """The overrides that change the configuration."""

    def config_key(self, overrides: dict[str, Any]) -> str:
        """The configuration the overrides make, however they say it."""

    def inputs(self, variants: list[Variant], out: Path) -> dict[str, Path | Launch]:
        """Each variant's trial input (a recipe file written under `out`, or a launch of the script)."""

    def planned_steps(self, trials: list[Trial]) -> int | None:
        """Optimizer steps the real run will take (what a start-up cost must be repaid within), if known."""

    def refusals(self, overrides: dict[str, Any]) -> list[str]:
        """What the one conflict rule refuses of the configuration the overrides make (accel.bench.refused)."""


@dataclass
class RecipeSubject:
    """A recipe (its --set applied)."""

    recipe: Recipe
    given = "recipe as given"

    def plain(self) -> dict[str, Any]:
        return self.recipe.dump()

    def effective(self, overrides: dict[str, Any]) -> dict[str, Any]:
        return effective(self.recipe, overrides)

    def config_key(self, overrides: dict[str, Any]) -> str:
        return config_key(self.recipe, overrides)

    def inputs(self, variants: list[Variant], out: Path) -> dict[str, Path | Launch]:
        recipes = {v.name: resolve_variant(self.recipe, Variant(v.name, self.effective(v.overrides))) for v in variants}
        return write_recipes(recipes, out)

    def planned_steps(self, trials: list[Trial]) -> int | None:
        """From the recipe's budget and the steps per epoch a trial reported."""
        if self.recipe.train.max_steps:
            return self.recipe.train.max_steps
        per_epoch = next((t.steps_per_epoch for t in trials if t.steps_per_epoch), None)
        return per_epoch * self.recipe.train.epochs if per_epoch else None

    def refusals(self, overrides: dict[str, Any]) -> list[str]:
        return recipe_refusals(resolve_variant(self.recipe, Variant("refusals", self.effective(overrides))))


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
