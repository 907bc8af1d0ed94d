"""The recipes and presets shipped with the package (recipes/ and configs/ at the repository's top), and how a
name on the command line finds one.

A recipe argument is a file when such a file exists (as it always was); otherwise a bare name (`quickstart`,
`cifar10-resnet18.yaml`) is a shipped recipe, so `accel train quickstart` works from any directory after
`pip install accel`. A `base:` entry that is not a file beside its recipe may likewise name a shipped preset
(`base: fast-cpu`).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import RecipeError


def _shipped_folder(name: str) -> Path:
    """accel/NAME inside an installed wheel; in a checkout (editable or not), NAME/ at the repository's top, where
    the files live (setup.py maps one to the other). Real folders: `base:` paths are resolved against them, which a
    zipped install could not offer, so accel reads them as plain paths."""
    package = Path(__file__).resolve().parents[1]
    inside = package / name
    return inside if inside.is_dir() else package.parent / name


RECIPES_DIR = _shipped_folder("recipes")
CONFIGS_DIR = _shipped_folder("configs")


def recipe_names() -> list[str]:
    """The shipped recipes' names, e.g. ["cifar10-resnet18", ..., "quickstart"]."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def preset_names() -> list[str]:
    """The shipped presets' names, e.g. ["cpu", "fast-cpu", "fast-cuda"]."""
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))


def _shipped(name: str, folder: Path) -> Path | None:
    """FOLDER/NAME.yaml for a bare name (no folder in it) when it exists."""
    if "/" in name or "\\" in name or not name:
        return None
    path = folder / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
    return path if path.is_file() else None


def find_recipe(arg: str | Path) -> Path:
    """The file ARG names, else the shipped recipe called ARG; an error listing the shipped names otherwise."""
    path = Path(arg)
    if path.is_file():
        if path.suffix == ".py":  # read as YAML it would be "a syntax error, line 1"
            raise RecipeError(
                f"{arg} is a Python script, not a recipe: this command takes a recipe YAML file or a shipped "
                "recipe's name. A script that uses accel.Engine runs as itself (`python "
                f"{arg}`); `accel bench -- python {arg}` measures it, and `accel COMMAND --help` says whether "
                "another command takes a script after `--`."
            )
        return path
    if path.is_dir():
        raise RecipeError(f"{arg} is a folder, not a recipe file: name the recipe's YAML file inside it.")
    shipped = _shipped(str(arg), RECIPES_DIR)
    if shipped is not None:
        return shipped
    names = recipe_names()
    hint = f" To train the shipped one, name it: `{path.stem}`." if path.stem in names else ""
    raise RecipeError(
        f"Recipe file not found: {arg}, and no shipped recipe has that name.{hint} "
        f"Shipped recipes: {', '.join(names)} (`accel recipes` describes them)."
    )


def find_base(name: str, beside: Path) -> Path | None:
    """A `base:` entry: the file relative to the recipe BESIDE it, else a shipped preset or recipe of that name."""
    path = (beside / name).resolve()
    if path.is_file():
        return path
    return _shipped(name, CONFIGS_DIR) or _shipped(name, RECIPES_DIR)
