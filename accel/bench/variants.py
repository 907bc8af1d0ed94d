"""The variants an A/B report compares, and the interleaved order their trials run in.

A variant is a name plus dotted recipe overrides (`speedups.amp.enabled: False`); whoever runs a trial applies
the overrides on top of the recipe. Two ways to build a list:
- `ablation_variants`: baseline (every speed-up under test off), all (every one on), `+NAME` (NAME added to
  baseline) and `-NAME` (NAME removed from all).
- `vary_variants`: the cartesian product of `--vary KEY=V1,V2` values; the first combination is the baseline.
A script's keys are prefixed: `arg:--OPTION` its own command-line option (`present`/`absent` switch a flag by its
presence: accel/bench/script_options.py), `env:NAME` its environment.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ..config.recipe_yaml import parse_value
from ..errors import AccelError, RecipeError


@dataclass(frozen=True)
class Variant:
    """One configuration under test: `name` labels it in reports, `overrides` are dotted recipe keys."""

    name: str
    # Excluded from hashing so variants can key dicts; names are unique within a report.
    overrides: dict[str, Any] = field(default_factory=dict, hash=False)


def _enabled(options: Any) -> bool:
    # `compile:` with no value in YAML loads as None, which means "on with defaults".
    return bool((options or {}).get("enabled", True))


def _switches(names: list[str], on: set[str], added: dict[str, dict]) -> dict[str, Any]:
    """The overrides that turn `on` on and the rest off; an `added` speed-up (not in the section) is set to its
    section when on and left out when off: exactly not listing it."""
    overrides: dict[str, Any] = {}
    for n in names:
        if n in added:
            overrides |= {f"speedups.{n}.{key}": value for key, value in added[n].items()} if n in on else {}
        else:
            overrides[f"speedups.{n}.enabled"] = n in on
    return overrides


def ablation_variants(speedups: dict[str, dict], added: dict[str, dict] | None = None) -> list[Variant]:
    """baseline, all, +NAME..., -NAME... for the enabled speed-ups of a recipe's `speedups:` section, and for
    the speed-ups in `added` (name -> the section that turns it on; a script's bench adds those the device can
    run).

    Speed-ups the recipe already disables are left alone (off everywhere, absent from overrides). With a
    single speed-up, "all" would equal "+NAME" and "-NAME" would equal baseline, so only baseline and
    "+NAME" are returned: the duplicates would cost trials and add no information.
    """
    added = added or {}
    names = [n for n, opts in (speedups or {}).items() if _enabled(opts)] + list(added)
    if not names:
        raise RecipeError(
            "--ablate needs at least one enabled speed-up in the recipe's `speedups:` section; "
            "this recipe has none. Add one (`--set speedups.amp.dtype=bf16`, or `speedups: {amp: {dtype: bf16}}` "
            "in the recipe) or use --vary."
        )
    everything = set(names)
    variants = [Variant("baseline", _switches(names, set(), added))]
    if len(names) > 1:
        variants.append(Variant("all", _switches(names, everything, added)))
    variants += [Variant(f"+{n}", _switches(names, {n}, added)) for n in names]
    if len(names) > 1:
        variants += [Variant(f"-{n}", _switches(names, everything - {n}, added)) for n in names]
    return variants


ARG = "arg:"  # --vary arg:--batch=16,32: the script's own option, not an engine key
ENV = "env:"  # --vary env:OMP_NUM_THREADS=1,2: an environment variable of the script's process


def format_value(value: Any) -> str:
    """The inverse of `parse_value` for names: true/false/null, numbers and strings as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def option_text(value: Any) -> str:
    """A script's option value on its command line: a boolean spelled as Python spells it (`True`), which
    argparse's converters, HfArgumentParser, jsonargparse and nanoGPT's configurator (`literal_eval`) all read."""
    return str(value) if isinstance(value, bool) else format_value(value)


def value_label(key: str, value: Any) -> str:
    """A value as a variant's name shows it: a script's option as the script gets it (`True`), a script key's
    None as the script as given (its own default)."""
    if value is None and key.startswith((ARG, ENV)):
        return "as given"
    return option_text(value) if key.startswith(ARG) else format_value(value)


VARY_SHAPES = {
    ARG: "arg:--batch=16,32 (the script's option; a flag by its presence: arg:--channels-last=absent,present)",
    ENV: "env:NAME=1,2 (a variable the script reads)",
    "": "data.batch_size=64,128 (a dotted recipe key)",
}


def _parse_vary(item: str) -> tuple[str, list[Any]]:
    key, sep, values = item.partition("=")
    key = key.strip()
    parts = [p for p in values.split(",") if p.strip()]
    if not sep or not key or not parts:
        shape = next(text for kind, text in VARY_SHAPES.items() if key.startswith(kind))  # "" fits every key
        raise AccelError(f"--vary `{item}` is not KEY=V1,V2 (comma-separated values), e.g. --vary {shape}.")
    if key.startswith((ARG, ENV)):
        return key, [_script_value(p) for p in parts]
    return key, [parse_value(p) for p in parts]


def _script_value(text: str) -> Any:
    """A script's option or variable as written: a number YAML would respell (`010` read as octal 8, `1:30` as 90,
    `1.10` as 1.1) is the text the user typed, which the script parses itself; true/false/null and quotes as YAML."""
    value = parse_value(text)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and format_value(value) != text.strip():
        return text.strip()
    return value


def vary_variants(vary: list[str]) -> list[Variant]:
    """The cartesian product of `KEY=V1,V2` items, first key varying slowest; the first one is the baseline."""
    if not vary:
        raise AccelError("--vary needs at least one KEY=V1,V2 item.")
    parsed = [_parse_vary(item) for item in vary]
    keys = [k for k, _ in parsed]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise AccelError(f"--vary names {', '.join(dup)} more than once; list all its values in one item.")
    variants = []
    for combo in itertools.product(*(vals for _, vals in parsed)):
        overrides = dict(zip(keys, combo))
        name = ",".join(f"{k}={value_label(k, v)}" for k, v in overrides.items())
        variants.append(Variant(name, overrides))
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise AccelError(f"--vary lists the same value twice: {', '.join(vary)}.")
    return variants


def interleave(variants: list[Variant], trials: int) -> list[tuple[int, Variant]]:
    """[(trial, variant), ...] in A B C A B C order, so machine drift hits every variant alike."""
    if trials < 1:
        raise AccelError(f"--trials must be at least 1, got {trials}.")
    return [(t, v) for t in range(trials) for v in variants]


def describe(variants: list[Variant]) -> str:
    """One line per variant for `--list`: its name and overrides."""
    width = max((len(v.name) for v in variants), default=0)
    lines = []
    for v in variants:
        sets = " ".join(f"{k}={format_value(x)}" for k, x in v.overrides.items())
        lines.append(f"{v.name:<{width}}  {sets}".rstrip())
    return "\n".join(lines)
