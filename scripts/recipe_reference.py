"""Write docs/recipe-reference.md from the recipe's pydantic models, so the reference cannot drift from the code.

python scripts/recipe_reference.py            # rewrite docs/recipe-reference.md
python scripts/recipe_reference.py --check    # exit 1 if the file is out of date (the tests do this)
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from accel.config.recipe import Recipe
from accel.registry import DATASETS, IMPORTED, LOSSES, OPTIMIZERS, SCHEDULERS, SPEEDUPS, TASKS

TARGET = Path(__file__).resolve().parent.parent / "docs" / "recipe-reference.md"


def _type(annotation: Any) -> str:
    """A short human reading of a type annotation: `int or 'auto'`, `one of 'ddp', 'fsdp'`, `mapping`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return ("one of " if len(args) > 1 else "") + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args)
    if origin in (dict, list, tuple):
        return f"{origin.__name__} of {', '.join(_type(a) for a in args)}" if args else origin.__name__
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    return "None" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


def _default(field) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, BaseModel):
        return "see below"
    return f"`{value!r}`"


def _table(model: type[BaseModel], prefix: str) -> list[str]:
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, field in model.model_fields.items():
        rows.append(
            f"| `{prefix}{name}` | {_type(field.annotation)} | {_default(field)} | "
            f"{(field.description or '').replace('|', '/')} |"
        )
    return rows


def _section(title: str, model: type[BaseModel], prefix: str) -> list[str]:
    lines = [f"### {title}", "", *_table(model, prefix), ""]
    for name, field in model.model_fields.items():
        annotation = field.annotation
        nested = [
            a
            for a in getattr(annotation, "__args__", (annotation,))
            if isinstance(a, type)
            and issubclass(a, BaseModel)
            and a.__module__.startswith("accel")
            and a.__name__ != "StrictModel"
        ]
        for sub in nested:
            lines += _section(f"`{prefix}{name}`", sub, f"{prefix}{name}.")
    return lines


def _named(title: str, key: str, registry, extra: tuple[str, ...] = ()) -> list[str]:
    lines = [f"## {title}: `{key}`", ""]
    for name in [*registry.names(), *extra]:
        lines += _section(f"`{name}`", registry.get(name).Config, f"{key}.")
    return lines


def render() -> str:
    lines = [
        "# Recipe reference",
        "",
        "Generated from the code by `python scripts/recipe_reference.py`; every key, its default and meaning.",
        "See docs/recipes.md for how recipes, `base:` and `--set` work.",
        "",
        "## Top level and fixed sections",
        "",
        *_section("recipe", Recipe, ""),
    ]
    lines += _named("Tasks", "task", TASKS, extra=(IMPORTED,))
    lines += _named("Datasets", "data.dataset", DATASETS)
    lines += _named("Optimizers", "optim", OPTIMIZERS)
    lines += _named("Schedules", "schedule", SCHEDULERS)
    lines += _named("Losses", "loss", LOSSES)
    lines += ["## Speed-ups: `speedups.NAME`", ""]
    for name in SPEEDUPS.names():
        doc = (SPEEDUPS.get(name).__doc__ or "").strip().splitlines()
        lines += [
            f"### `{name}`",
            "",
            doc[0] if doc else "",
            "",
            *_table(SPEEDUPS.get(name).Config, f"speedups.{name}."),
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not TARGET.is_file() or TARGET.read_text() != text:
            print(f"{TARGET} is out of date: run python scripts/recipe_reference.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(TARGET)
    return 0


if __name__ == "__main__":
    sys.exit(main())
