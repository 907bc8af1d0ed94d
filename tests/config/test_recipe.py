"""Recipes: inheritance, overrides, validation messages that point at the file and line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from accel.config.recipe import load_recipe, validate_recipe
from accel.config.recipe_yaml import parse_value, read_yaml
from accel.errors import RecipeError

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_recipe_validates_with_defaults(tiny):
    recipe = validate_recipe(tiny)
    assert recipe.data.batch_size == 16
    assert recipe.optim.name == "sgd" and recipe.optim.momentum == 0.9
    assert recipe.schedule.name == "none" and recipe.loss.label_smoothing == 0.0


def test_resolved_dump_round_trips(tiny, write_recipe):
    recipe = validate_recipe(tiny)
    again = load_recipe(write_recipe(recipe.dump_yaml()))
    assert again == recipe


def test_base_is_merged_deep_and_the_recipe_wins(tiny, write_recipe, tmp_path):
    (tmp_path / "configs").mkdir()
    write_recipe({"data": {"batch_size": 8, "drop_last": False}, "seed": 5}, "configs/base.yaml")
    tiny["base"] = "configs/base.yaml"
    recipe = load_recipe(write_recipe(tiny))
    assert recipe.data.batch_size == 16  # the recipe wins
    assert recipe.data.drop_last is False and recipe.seed == 0  # merged from base; seed set by the recipe


def test_set_overrides_are_typed_like_yaml(tiny, write_recipe):
    path = write_recipe(tiny)
    recipe = load_recipe(path, ["optim.lr=1e-3", "train.epochs=3", "optim.nesterov=false", "speedups.channels_last={}"])
    assert recipe.optim.lr == pytest.approx(1e-3) and recipe.train.epochs == 3
    assert recipe.optim.nesterov is False and "channels_last" in recipe.speedups
    assert parse_value("3e-4") == pytest.approx(3e-4)  # YAML 1.1 would read a string here


def _error(tiny_or_text, write_recipe, overrides=()) -> str:
    with pytest.raises(RecipeError) as err:
        load_recipe(write_recipe(tiny_or_text), list(overrides))
    return str(err.value)


def test_misspelt_key_names_path_file_line_and_suggestion(tiny, write_recipe):
    tiny["data"]["batch_sise"] = tiny["data"].pop("batch_size")
    message = _error(tiny, write_recipe)
    assert "`data.batch_sise` is not a valid key" in message
    assert "did you mean `batch_size`?" in message
    assert "recipe.yaml, line " in message


def test_misspelt_key_inside_a_named_section(tiny, write_recipe):
    tiny["optim"]["momentun"] = 0.8
    message = _error(tiny, write_recipe)
    assert "`optim.momentun`" in message and "did you mean `momentum`?" in message


@pytest.mark.parametrize(
    "key, value, words",
    [
        (("optim", "lr"), -0.1, "greater than 0"),
        (("data", "batch_size"), 0, "greater than or equal to 1"),
        (("train", "epochs"), "many", "valid integer"),
    ],
)
def test_bad_values_are_named(tiny, write_recipe, key, value, words):
    tiny[key[0]][key[1]] = value
    message = _error(tiny, write_recipe)
    assert f"`{'.'.join(key)}`" in message and words in message


def test_yaml_syntax_error_gives_line_and_column(write_recipe):
    message = _error("model: {name: small_cnn\ndata: [\n", write_recipe)
    assert "YAML syntax error" in message and "line " in message and "column " in message


def test_missing_recipe_and_missing_base(tiny, write_recipe, tmp_path):
    with pytest.raises(RecipeError, match="Recipe file not found"):
        load_recipe(tmp_path / "nope.yaml")
    tiny["base"] = "missing.yaml"
    assert "`base:` file not found" in _error(tiny, write_recipe)


@pytest.mark.parametrize(
    "section, name, kind",
    [
        (("optim",), "adam", "optimizer"),
        (("data", "dataset"), "mnist", "dataset"),
        (("schedule",), "cosin", "scheduler"),
    ],
)
def test_unknown_names_list_the_valid_ones(tiny, write_recipe, section, name, kind):
    node = tiny
    for key in section[:-1]:
        node = node[key]
    node.setdefault(section[-1], {})["name"] = name
    message = _error(tiny, write_recipe)
    assert f"Unknown {kind} `{name}`" in message and "Valid" in message


def test_unknown_speedup_suggests_the_closest(tiny, write_recipe):
    tiny["speedups"] = {"chanels_last": {}}
    assert "did you mean `channels_last`?" in _error(tiny, write_recipe)


def test_override_error_points_at_the_override(tiny, write_recipe):
    message = _error(tiny, write_recipe, ["data.batch_size=-4"])
    assert "--set data.batch_size=-4" in message


def test_duplicate_keys_are_an_error(write_recipe):
    assert "appears twice" in _error("seed: 1\nseed: 2\n", write_recipe)


def test_every_problem_is_reported_at_once(tiny, write_recipe):
    tiny["optim"]["lr"] = -1
    tiny["train"]["epochs"] = 0
    message = _error(tiny, write_recipe)
    assert "`optim.lr`" in message and "`train.epochs`" in message


def test_shipped_quickstart_loads():
    recipe = load_recipe("quickstart")
    assert recipe.data.dataset.name == "mnist5k" and recipe.device == "cpu"
    assert yaml.safe_load(recipe.dump_yaml())["name"] == "quickstart"


def test_yaml_12_booleans_keep_on_and_yes_as_words():
    assert parse_value("on") == "on" and parse_value("yes") == "yes"
    assert parse_value("true") is True and parse_value("False") is False


BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)
)


@pytest.mark.slow
def test_an_alias_bomb_is_refused_in_bounded_memory(tmp_path):
    # 9 levels of 10 aliases: 10^9 values once expanded. Under a 1 GiB address-space limit the refusal must come
    # before any expansion (the line tracking used to expand every alias: 3 GB, then MemoryError).
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB + "model: {name: small_cnn}\n")
    code = (
        f"import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        f"from accel.errors import RecipeError\nfrom accel.config.recipe_yaml import read_yaml\n"
        f"try:\n    read_yaml(__import__('pathlib').Path({str(path)!r}))\n"
        f"except RecipeError as err:\n    print(err)\nelse:\n    print('accepted')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "expands to more than 100000 values through its aliases" in done.stdout
    assert "bomb.yaml" in done.stdout


def test_aliases_of_an_ordinary_size_still_work(write_recipe, tiny):
    text = "shape: &shape [1, 8, 8]\n" + yaml.safe_dump(tiny, sort_keys=False)
    data, origins = read_yaml(write_recipe(text.replace("shape:\n    - 1\n    - 8\n    - 8", "shape: *shape")))
    assert data["data"]["dataset"]["shape"] == [1, 8, 8] and origins[("shape",)].endswith("line 1")


def test_a_self_referencing_alias_is_refused(write_recipe):
    message = _error("a: &a\n  b: *a\n", write_recipe)
    assert "refers to itself" in message
