"""Reading recipe YAML: line numbers for every key, `base:` inheritance and `--set` overrides.

The result is a plain dict plus an `Origins` map from each dotted path to the file and line that set it,
so a validation error can point at the exact place the user has to edit.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from ..errors import RecipeError
from .shipped import find_base, preset_names

Path_ = tuple  # a key path inside the recipe, e.g. ("data", "batch_size")
# Values a recipe may hold once its aliases are expanded: real recipes hold hundreds; an alias bomb (nine levels
# of ten aliases) a billion, which the line tracking and validation below would expand without bound.
MAX_VALUES = 100_000


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 scalars: `3e-4` is a float, and only true/false are booleans (YAML 1.1 also
    turns `on`, `off`, `yes` and `no` into booleans, so `augment: {on: device}` would lose its key)."""


_BOOL = "tag:yaml.org,2002:bool"
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^[-+]?(?:\d[\d_]*)?(?:\.\d*)?[eE][-+]?\d+$|^[-+]?\d[\d_]*\.\d*$|^[-+]?\.\d+$"
        r"|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"
    ),
    list("-+0123456789."),
)


class Origins(dict):
    """Dotted key path -> 'file, line N' (or '--set a.b=c') for error messages; and the sections an override
    gave a whole mapping, which replaced the section rather than merging into it."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.replaced: dict[Path_, str] = {}  # section path -> how to set its keys one by one instead

    def where(self, path: Path_) -> str:
        for end in range(len(path), -1, -1):
            if tuple(path[:end]) in self:
                return self[tuple(path[:end])]
        return "the recipe"

    def replaced_note(self, path: Path_) -> str:
        """' A mapping given to --set replaces ...' when a section above `path` (a key found missing) was given
        whole by an override, which dropped the recipe's other keys there; else ''."""
        for end in range(len(path) - 1, 0, -1):
            if tuple(path[:end]) in self.replaced:
                return self.replaced[tuple(path[:end])]
        return ""


def parse_value(text: str) -> Any:
    """Type a `--set` value the way the same text would be typed in a recipe file."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        return text


def _check_size(root: yaml.Node, source: str) -> None:
    """Refuse YAML that aliases make too large to expand, or that contains itself, in time and memory
    proportional to the text: each node's expanded size is counted once, however often it is aliased."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_:
            raise RecipeError(
                f"{source}, line {node.start_mark.line + 1}: an alias refers to itself (a value that "
                "contains itself); a recipe must be a finite tree of values."
            )
        open_.add(id(node))
        children = (
            node.value
            if isinstance(node, yaml.SequenceNode)
            else [n for pair in node.value for n in pair]
            if isinstance(node, yaml.MappingNode)
            else []
        )
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_VALUES:
                raise RecipeError(
                    f"{source}: the YAML expands to more than {MAX_VALUES} values through its "
                    "aliases (&anchor / *alias), so it is refused unread; a recipe holds far fewer. "
                    f"Look at the aliases near line {node.start_mark.line + 1}."
                )
        open_.discard(id(node))
        sizes[id(node)] = total
        return total

    size(root)


def _record_lines(node: yaml.Node, path: Path_, source: str, origins: Origins) -> None:
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                line = key_node.start_mark.line + 1
                raise RecipeError(f"{source}, line {line}: key `{'.'.join(map(str, path + (key,)))}` appears twice.")
            seen.add(key)
            origins[path + (key,)] = f"{source}, line {key_node.start_mark.line + 1}"
            _record_lines(value_node, path + (key,), source, origins)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            origins[path + (i,)] = f"{source}, line {item.start_mark.line + 1}"
            _record_lines(item, path + (i,), source, origins)


def read_yaml(path: Path) -> tuple[dict, Origins]:
    """One YAML file -> (mapping, origins). Syntax errors name the line and column."""
    if not path.is_file():
        raise RecipeError(f"Recipe file not found: {path}. `accel recipes` lists the shipped recipes.")
    text = path.read_text()
    try:
        node = yaml.compose(text, Loader=_Loader)
        if node is not None:
            _check_size(node, str(path))
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise RecipeError(f"YAML syntax error in {path}{where}: {problem}.") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RecipeError(f"{path} must hold a mapping of recipe keys, not a {type(data).__name__}.")
    origins = Origins()
    _record_lines(node, (), str(path), origins)
    return data, origins


def recipe_files(path: Path, _seen: tuple[Path, ...] = ()) -> list[Path]:
    """The recipe file and every `base:` file it reads, resolved: what no output may replace (accel/cli/outputs.py)."""
    path = path.resolve()
    files = [path]
    bases = read_yaml(path)[0].get("base")
    for base in [] if bases is None else [bases] if isinstance(bases, str) else list(bases):
        base_path = find_base(str(base), path.parent)
        if base_path is not None and base_path not in _seen + (path,):
            files += recipe_files(base_path, _seen + (path,))
    return files


def deep_merge(base: dict, top: dict) -> dict:
    """`top` wins; nested mappings merge key by key; lists and scalars are replaced whole."""
    merged = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_with_bases(path: Path, _chain: tuple[Path, ...] = ()) -> tuple[dict, Origins]:
    """A recipe file merged over its `base:` file(s), which are resolved relative to it."""
    path = path.resolve()
    if path in _chain:
        raise RecipeError(f"`base:` files include each other in a loop: {' -> '.join(map(str, _chain + (path,)))}.")
    data, origins = read_yaml(path)
    bases = data.pop("base", None)
    if bases is None:
        return data, origins
    merged, merged_origins = {}, Origins()
    for base in [bases] if isinstance(bases, str) else list(bases):
        base_path = find_base(str(base), path.parent)
        if base_path is None:
            missing = (path.parent / str(base)).resolve()
            raise RecipeError(
                f"{origins.where(('base',))}: `base:` file not found: {missing}, nor a shipped preset "
                f"of that name ({', '.join(preset_names())})."
            )
        base_data, base_origins = load_with_bases(base_path, _chain + (path,))
        merged = deep_merge(merged, base_data)
        merged_origins.update(base_origins)
    merged_origins = _under(merged_origins, data, origins)
    merged_origins.update({k: v for k, v in origins.items() if k != ("base",)})
    return deep_merge(merged, data), merged_origins


def _under(base_origins: Origins, top: dict, top_origins: Origins) -> Origins:
    """The base files' origins as they stand under the file that names them: a key whose section the top file
    replaced whole is gone (an error there is the top file's); one merged into a section the top file also sets
    says so, since the user edits that file (`optim: {name: sgd}` there makes the base's `betas` wrong)."""
    kept = Origins()
    for path, where in base_origins.items():
        set_above = [path[:end] for end in range(len(path) - 1, 0, -1) if path[:end] in top_origins]
        if not set_above:
            kept[path] = where
        elif isinstance(_get(top, set_above[0]), dict):
            section = set_above[0]
            kept[path] = f"{where} (merged from `base:` into `{'.'.join(map(str, section))}` at {top_origins[section]})"
    return kept


def _get(data: Any, path: Path_) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def apply_overrides(data: dict, origins: Origins, overrides: list[str], label: str = "--set") -> dict:
    """Apply `a.b=c` overrides in order; the value is typed as YAML. `label` names where they came from."""
    data = copy.deepcopy(data)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise RecipeError(f"`{label} {item}` must look like `key.path=value`, e.g. `optim.lr=1e-3`.")
        parts = key.strip().split(".")
        node = data
        for i, part in enumerate(parts[:-1]):
            if not isinstance(node.get(part), dict):
                if part in node:
                    raise RecipeError(f"`{label} {item}`: `{'.'.join(parts[: i + 1])}` is a value, not a section.")
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value = parse_value(text)
        for below in [path for path in origins if len(path) > len(parts) and path[: len(parts)] == tuple(parts)]:
            del origins[below]  # replaced with the value: an error under it is the override's
        _note_replaced(origins, tuple(parts), value, label)
        for depth in range(1, len(parts) + 1):
            origins.setdefault(tuple(parts[:depth]), f"{label} {item}")
        origins[tuple(parts)] = f"{label} {item}"
    return data


def _note_replaced(origins: Origins, section: Path_, value: Any, label: str) -> None:
    """Remember a section an override gave whole, with the overrides that would set only its keys."""
    for path in [p for p in origins.replaced if p[: len(section)] == section]:
        del origins.replaced[path]  # the latest override there decides
    if not isinstance(value, dict):
        return
    dotted = ".".join(section)
    keys = " ".join(f"{label} {shlex.quote(f'{key}={text}')}" for key, text in _flat(dotted, value))
    origins.replaced[section] = (
        f" A mapping given to {label} replaces the whole `{dotted}` section, the recipe's other keys there too"
        + (f"; to change only these keys, set each one: `{keys}`." if keys else ".")
    )


def _flat(prefix: str, mapping: dict) -> list[tuple[str, str]]:
    """(dotted key, value as an override types it) for each value in a nested mapping."""
    items = []
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            items += _flat(f"{prefix}.{key}", value)
        else:
            items.append((f"{prefix}.{key}", value if isinstance(value, str) else json.dumps(value)))
    return items
