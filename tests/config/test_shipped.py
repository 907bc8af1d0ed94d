"""A recipe argument is a file when one exists, else a shipped recipe's name; `base:` may name a shipped preset."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from accel.config.recipe import load_recipe
from accel.config.shipped import CONFIGS_DIR, RECIPES_DIR, find_recipe, preset_names, recipe_names
from accel.errors import RecipeError


def test_the_package_holds_the_recipes_and_presets():
    assert {"quickstart", "cifar10-resnet18", "lm-bytes"} <= set(recipe_names())
    assert {"cpu", "fast-cpu", "fast-cuda"} <= set(preset_names())


def test_in_a_checkout_they_are_the_files_at_the_repository_top():
    root = Path(__file__).resolve().parents[2]
    assert (RECIPES_DIR, CONFIGS_DIR) == (root / "recipes", root / "configs")
    assert load_recipe(root / "recipes" / "quickstart.yaml").name == "quickstart"  # its base: ../configs/cpu.yaml


@pytest.mark.parametrize("name", ["quickstart", "quickstart.yaml"])
def test_a_bare_name_is_a_shipped_recipe(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_recipe(name) == RECIPES_DIR / "quickstart.yaml"


def test_a_file_in_the_current_folder_wins_over_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart.yaml").write_text("name: mine\n")
    assert find_recipe("quickstart.yaml").resolve() == tmp_path / "quickstart.yaml"


@pytest.mark.parametrize("arg", ["nope", "some/folder/quickstart.yaml"])
def test_neither_file_nor_name_lists_the_shipped_names(arg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecipeError, match="Shipped recipes: .*quickstart") as err:
        find_recipe(arg)
    assert arg in str(err.value)


def test_an_old_repository_path_names_the_shipped_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # recipes/ at the repository root moved into the package
    with pytest.raises(RecipeError, match="name it: `quickstart`"):
        find_recipe("recipes/quickstart.yaml")


def test_the_shipped_bases_resolve_inside_the_package():
    assert load_recipe("cifar10-resnet18-cuda").speedups.keys() >= {"cudnn", "compile"}  # fast-cuda's


@pytest.mark.parametrize("base", ["fast-cpu", "fast-cpu.yaml"])
def test_a_user_recipe_bases_on_a_shipped_preset_by_name(base, tiny, write_recipe):
    tiny["base"] = base
    tiny.pop("speedups", None)
    recipe = load_recipe(write_recipe(tiny))
    assert set(recipe.speedups) == set(yaml.safe_load((CONFIGS_DIR / "fast-cpu.yaml").read_text())["speedups"])


def test_a_missing_base_names_the_shipped_presets(tiny, write_recipe):
    tiny["base"] = "fast-gpu"
    with pytest.raises(RecipeError, match="`base:` file not found.*fast-cuda"):
        load_recipe(write_recipe(tiny))
