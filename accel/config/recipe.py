"""The recipe: pydantic models of every section, loading, validation and the resolved dump.

Sections whose options depend on a name (dataset, optimizer, schedule, loss, each speed-up) are validated
against the Config class that the named builder registered, so `optim: {name: sgd, betas: ...}` fails
with the same precise message as a typo anywhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, SerializeAsAny, ValidationError, field_validator

from ..callbacks.checkpointing import CheckpointConfig
from ..data.pipeline import DataConfig
from ..errors import RecipeError, did_you_mean
from ..models import ModelConfig
from ..registry import (
    DATASETS,
    LOSSES,
    OPTIMIZERS,
    SCHEDULERS,
    SPEEDUPS,
    TASKS,
    Registry,
    add_import_roots,
    announce_user_code,
    is_import_string,
)
from ..schema import StrictModel
from . import builtins  # noqa: F401  (fills the registries the recipe refers to)
from .recipe_yaml import Origins, apply_overrides, load_with_bases
from .shipped import find_recipe
from .train_config import TrainConfig


class LogConfig(StrictModel):
    every_steps: int = Field(20, ge=1, description="write a step record to metrics.jsonl every N optimizer steps")
    tensorboard: bool = Field(True, description="write TensorBoard event files under tb/")
    progress: bool = Field(True, description="show a progress bar with samples/s on a terminal")


class Recipe(StrictModel):
    name: str = Field(
        "run", description="names the run directory runs/<name>-<timestamp>: a folder name, without / or \\"
    )
    seed: int = Field(0, description="seeds python, numpy and torch, the split and the shuffles")
    model: ModelConfig
    data: DataConfig
    optim: SerializeAsAny[StrictModel] = Field(description="`name` of an optimizer plus its options")
    schedule: SerializeAsAny[StrictModel] = Field(
        default_factory=lambda: SCHEDULERS.get("none").Config(name="none"),
        description="learning-rate schedule, stepped per optimizer step",
    )
    task: SerializeAsAny[StrictModel] = Field(
        default_factory=lambda: TASKS.get("classification").Config(),
        description="what a step computes from a batch: classification | language_model | regression | "
        "model_loss (the model returns its loss) | package.module:attribute (your own Task or function)",
    )
    loss: SerializeAsAny[StrictModel] = Field(
        default_factory=lambda: LOSSES.get("cross_entropy").Config(),
        description="the cross-entropy of classification and language_model",
    )
    train: TrainConfig = Field(default_factory=TrainConfig)
    speedups: dict[str, SerializeAsAny[StrictModel]] = Field(
        default_factory=dict, description="speed-up name -> its options"
    )
    device: str = Field("auto", description="auto | cpu | cuda | cuda:N | mps | xla")
    strategy: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="how several processes (`accel train --nproc N`, torchrun) share the model: ddp keeps a "
        "whole copy in each; fsdp (FSDP2) shards parameters, gradients and optimizer state across them. One "
        "process trains unsharded either way",
    )
    strict: bool = Field(False, description="a speed-up that cannot run here is an error instead of a skip")
    log: LogConfig = Field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)

    @field_validator("name")
    @classmethod
    def _one_folder(cls, value: str) -> str:
        # the name is joined under runs/ when no --out is given: a path in it would put the run elsewhere
        if not value.strip() or any(c in value for c in "/\\\0") or value in {".", ".."}:
            raise ValueError(
                "a run's name becomes its folder (runs/<name>-<timestamp>), so it must be a plain folder name, "
                "without / or \\; choose where a run goes with --out"
            )
        return value

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        kind = value.split(":")[0]
        if kind not in {"auto", "cpu", "cuda", "mps", "xla"}:
            raise ValueError(f"unknown device `{value}`; use auto, cpu, cuda, cuda:N, mps or xla")
        return value

    def dump(self) -> dict[str, Any]:
        """The fully resolved recipe as plain data (what `recipe.yaml` in a run directory holds)."""
        return self.model_dump(mode="json")

    def dump_yaml(self) -> str:
        return yaml.safe_dump(self.dump(), sort_keys=False)


# (path, registry): sections validated against the registered builder's own Config.
NAMED_SECTIONS: list[tuple[tuple[str, ...], Registry]] = [
    (("data", "dataset"), DATASETS),
    (("optim",), OPTIMIZERS),
    (("schedule",), SCHEDULERS),
    (("loss",), LOSSES),
    (("task",), TASKS),
]


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Read a recipe file (with its `base:` files), apply `key=value` overrides, and validate it. The user code it
    names (import strings) is logged: every command reads its recipe here."""
    path = find_recipe(path)
    data, origins = load_with_bases(path)
    data = apply_overrides(data, origins, overrides or [])
    recipe = validate_recipe(data, origins)
    user_code = {"model": recipe.model.name, "task": recipe.task.name, "dataset": recipe.data.dataset.name}
    if any(is_import_string(name) for name in user_code.values()):
        add_import_roots(path)
    announce_user_code(user_code)  # the sections that take code
    return recipe


def validate_recipe(data: dict, origins: Origins | None = None) -> Recipe:
    """Validate plain data as a recipe; every problem is reported at once with its file and line."""
    origins = origins or Origins()
    problems: list[str] = []
    data = dict(data)
    failed = {path for path, registry in NAMED_SECTIONS if not _validate_named(data, path, registry, origins, problems)}
    validate_speedups(data, origins, problems)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as err:  # a section that failed above is reported once, not again as missing
        problems += [
            _describe(e, (), Recipe, origins)
            for e in err.errors()
            if not (e["type"] == "missing" and tuple(e["loc"]) in failed)
        ]
        recipe = None
    if problems:
        raise RecipeError("Invalid recipe:\n" + "\n".join(f"  - {p}" for p in problems))
    return recipe


def _validate_named(
    data: dict, path: tuple[str, ...], registry: Registry, origins: Origins, problems: list[str]
) -> bool:
    """Replace the section at `path` by its validated Config; False (and the section removed) if it fails."""
    parent = data
    for key in path[:-1]:
        if not isinstance(parent.get(key), dict):
            return True
        parent[key] = parent = dict(parent[key])
    section = parent.get(path[-1])
    if section is None:
        return True
    if isinstance(section, str):  # shorthand: `optim: sgd`
        section = {"name": section}
    config = _validate_with(section, path, lambda name: registry.get(name).Config, registry.kind, origins, problems)
    if config is None:
        parent.pop(path[-1])
        return False
    parent[path[-1]] = config
    return True


def unknown_top_keys(data: dict, origins: Origins) -> list[str]:
    """A problem for each top-level key a recipe does not have, worded as validation words it (file, line, the
    closest key), for a file read for one of its sections."""
    return [
        _describe({"type": "extra_forbidden", "loc": (key,)}, (), Recipe, origins)
        for key in data
        if key not in Recipe.model_fields
    ]


def validate_speedups(data: dict, origins: Origins, problems: list[str]) -> None:
    """Replace `data['speedups']` by each speed-up's validated Config; problems named with file and line."""
    section = data.get("speedups")
    if not isinstance(section, dict):
        return
    resolved = {}
    for name, options in section.items():
        path = ("speedups", name)
        if name not in SPEEDUPS:
            problems.append(
                f"{origins.where(path)}: unknown speed-up `{name}`{did_you_mean(name, SPEEDUPS.names())}. "
                f"Valid speed-ups: {', '.join(SPEEDUPS.names())}."
            )
            continue
        options = {} if options is None else options
        if isinstance(options, bool):  # shorthand: `channels_last: true`
            options = {"enabled": options}
        config_cls = SPEEDUPS.get(name).Config
        config = _validate_with(
            options, path, lambda _, cls=config_cls: cls, "speed-up", origins, problems, named=False
        )
        if config is not None:
            resolved[name] = config
    data["speedups"] = resolved


def _validate_with(
    section: Any, path: tuple, config_for, kind: str, origins: Origins, problems: list[str], named: bool = True
) -> StrictModel | None:
    dotted = ".".join(map(str, path))
    if not isinstance(section, dict):
        problems.append(f"{origins.where(path)}: `{dotted}` must be a mapping of options, not {section!r}.")
        return None
    if named and "name" not in section:
        note = origins.replaced_note(path + ("name",))
        problems.append(f"{origins.where(path)}: `{dotted}` needs a `name` ({kind} to use).{note}")
        return None
    try:
        config_cls = config_for(section.get("name"))
    except Exception as err:  # an unknown name: the registry's message lists the valid ones
        problems.append(f"{origins.where(path + ('name',))}: `{dotted}.name`: {err}")
        return None
    try:
        return config_cls.model_validate(section)
    except ValidationError as err:
        problems.extend(_describe(e, path, config_cls, origins) for e in err.errors())
        return None


def _describe(error: dict, prefix: tuple, model_cls: type, origins: Origins) -> str:
    """One pydantic error -> 'file, line N: `dotted.key` <what is wrong> (did you mean ...)'."""
    loc = prefix + tuple(error["loc"])
    dotted = ".".join(map(str, loc))
    where = origins.where(loc)
    if error["type"] == "extra_forbidden":
        valid = _fields_at(model_cls, tuple(error["loc"])[:-1])
        hint = did_you_mean(loc[-1], valid)
        listing = f" Valid keys here: {', '.join(valid)}." if valid else ""
        return f"{where}: `{dotted}` is not a valid key{hint}.{listing}"
    if error["type"] == "missing":
        return f"{where}: `{dotted}` is required but missing.{origins.replaced_note(loc)}"
    return f"{where}: `{dotted}` = {error.get('input')!r}: {error['msg']}."


def _fields_at(model_cls: Any, loc: tuple) -> list[str]:
    """The valid keys of the model found by walking `loc` down from `model_cls` (best effort)."""
    for key in loc:
        field = getattr(model_cls, "model_fields", {}).get(key)
        if field is None:
            return []
        model_cls = _model_in(field.annotation)
    return sorted(getattr(model_cls, "model_fields", {}))


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
