"""What a bench will run, decided before any trial: the variants (--ablate or --vary, narrowed by --only), each
resolved into a recipe up front (a bad value fails in a second, not after an hour of trials) and written as the
exact input of its trials, and those the one conflict rule refuses (reported refused, never run)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..config.recipe import Recipe, load_recipe, validate_recipe
from ..config.recipe_yaml import Origins, apply_overrides
from ..errors import AccelError, RecipeError
from .refused import new_refusals, recipe_refusals
from .variants import Variant, ablation_variants, vary_variants


@dataclass
class BenchPlan:
    """What a bench will run: the variants, which one is the baseline, and each one's resolved recipe."""

    recipe_path: Path
    name: str
    variants: list[Variant]
    baseline: str
    recipes: dict[str, Recipe]
    refused: dict[str, str] = field(default_factory=dict)  # variants the conflict rule refuses: not run


def resolve_variant(base: Recipe, variant: Variant) -> Recipe:
    """`base` (already resolved, --set applied) with the variant's overrides, validated like `--set`."""
    # JSON text is YAML, so typed values survive apply_overrides' parsing ("64" stays a string, 64 an int).
    items = [f"{key}={json.dumps(value)}" for key, value in variant.overrides.items()]
    origins = Origins()
    try:
        return validate_recipe(apply_overrides(base.dump(), origins, items), origins)
    except RecipeError as err:
        raise RecipeError(f"variant `{variant.name}`: {err}") from None


def plan_bench(
    recipe_path: str | Path, sets: list[str], ablate: bool, vary: list[str], only: list[str] | None = None
) -> BenchPlan:
    """Load the recipe with `sets`, build the variants (--ablate or --vary, narrowed to `only`) and resolve
    every one up front, so a bad value fails in a second rather than after an hour of trials."""
    if ablate == bool(vary):
        raise AccelError(
            "accel bench needs exactly one of --ablate (every speed-up on/off) or --vary KEY=V1,V2 "
            "(repeatable), e.g. --vary data.batch_size=64,128."
        )
    base = load_recipe(recipe_path, sets)
    variants = ablation_variants(base.dump()["speedups"]) if ablate else vary_variants(vary)
    if only:
        variants = only_variants(variants, only)
    recipes = {v.name: resolve_variant(base, v) for v in variants}
    baseline = variants[0].name
    refused = new_refusals({name: recipe_refusals(recipe) for name, recipe in recipes.items()}, baseline)
    return BenchPlan(Path(recipe_path), base.name, variants, baseline, recipes, refused)


def only_variants(variants: list[Variant], names: list[str]) -> list[Variant]:
    """The named variants, the first variant (the report's baseline) always kept."""
    known = {v.name for v in variants}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise AccelError(f"--only: no variant named {', '.join(unknown)}; variants: {', '.join(sorted(known))}.")
    return [v for i, v in enumerate(variants) if i == 0 or v.name in names]


def slug(index: int, name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "._=-" else "_" for c in name)
    return f"{index:02d}-{safe[:80]}"


def write_recipes(recipes: dict[str, Recipe], out: Path) -> dict[str, Path]:
    """Each variant's resolved recipe as OUT/recipes/NN-NAME.yaml: the exact input of its trials."""
    folder = Path(out) / "recipes"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for i, (name, recipe) in enumerate(recipes.items()):
        paths[name] = folder / f"{slug(i, name)}.yaml"
        paths[name].write_text(f"# accel bench variant `{name}`, fully resolved\n{recipe.dump_yaml()}")
    return paths
