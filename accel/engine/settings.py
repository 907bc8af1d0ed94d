"""An engine's settings from a hand-written script, and from outside it.

The script gives `speedups=` as a recipe's `speedups:` section (a mapping), a preset by name (`"fast-cuda"`) or a
YAML file, plus `device=`, `strategy=` and `optimizer=` (None: the loop's own optimizer, always the default;
`"muon"`: Muon on the hidden matrices and AdamW on the rest, built from the loop's optimizer by
accel.optimizers.builders.muon_from). Outside the script, two environment variables win over what it passed, so
`accel bench -- python train.py` (and a user) can change any setting without editing it:
- `ACCEL_SPEEDUPS=FILE`: the speed-ups section of FILE (or a preset name) replaces the script's (a top key no
  recipe has, such as a misspelt `speedup:`, is refused rather than read as no speed-ups);
- `ACCEL_SET="speedups.compile.enabled=false device=cpu"`: `--set` overrides, split as a shell splits arguments.
Each override is logged once; a key that does not exist is refused with the closest valid key.
"""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.recipe import unknown_top_keys, validate_speedups
from ..config.recipe_yaml import Origins, apply_overrides, load_with_bases
from ..config.shipped import find_base, preset_names
from ..errors import RecipeError, did_you_mean
from ..schema import StrictModel

log = logging.getLogger("accel")
SET_VARIABLE, SPEEDUPS_VARIABLE = "ACCEL_SET", "ACCEL_SPEEDUPS"
KEYS = ("device", "optimizer", "speedups", "strategy")
STRATEGIES = ("ddp", "fsdp")
OPTIMIZERS = ("muon",)


@dataclass(frozen=True)
class Settings:
    speedups: dict[str, StrictModel]  # name -> validated Config, in the order given
    device: str
    strategy: str | None  # None: ddp when torchrun starts several processes
    optimizer: str | None = (
        None  # None: the loop's own; "muon": built from it at setup (accel.optimizers.builders.muon_from)
    )


def engine_settings(
    speedups: Any, device: str, strategy: str | None, env: dict | None = None, optimizer: str | None = None
) -> Settings:
    """The script's settings with the environment's overrides applied, validated."""
    env = os.environ if env is None else env
    say_to_stderr()
    section, origins = _speedups_section(speedups, "the script's `speedups=`")
    if env.get(SPEEDUPS_VARIABLE):
        section, origins = _speedups_section(env[SPEEDUPS_VARIABLE], SPEEDUPS_VARIABLE)
        log.info("%s=%s replaces the script's speed-ups", SPEEDUPS_VARIABLE, env[SPEEDUPS_VARIABLE])
    data = {"speedups": section, "device": device, "strategy": strategy, "optimizer": optimizer}
    overrides = set_items(env.get(SET_VARIABLE, ""))
    if overrides:
        data = apply_overrides(data, origins, overrides, label=SET_VARIABLE)
    settings = _validated(data, origins)
    for item in overrides:  # said once they are known to apply: never before a refusal of them
        log.info("%s overrides the script: %s", SET_VARIABLE, item)
    return settings


def set_items(text: str) -> list[str]:
    """ACCEL_SET's items, split as a shell splits arguments (so a value may hold spaces when quoted)."""
    try:
        return shlex.split(text)
    except ValueError as err:  # shlex's "No closing quotation" names neither the variable nor its text
        raise RecipeError(
            f'{SET_VARIABLE}="{text}" cannot be split into items: {err}. It is read as a shell reads arguments: '
            f"close the quote, or quote an item that holds spaces whole ({SET_VARIABLE}=\"'speedups.amp={{dtype: "
            "bf16}' device=cpu\")."
        ) from None


def say_to_stderr() -> None:
    """A script that set up no logging still hears what accel decides (overrides, skipped speed-ups) on stderr,
    as `accel train` says it; a script with logging of its own keeps its own."""
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("accel: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def _speedups_section(speedups: Any, source: str) -> tuple[dict, Origins]:
    if speedups is None:
        return {}, Origins()
    if isinstance(speedups, dict):
        return dict(speedups), Origins({("speedups",): source})
    if isinstance(speedups, (str, Path)):
        path = Path(speedups) if Path(speedups).is_file() else find_base(str(speedups), Path.cwd())
        if path is None:
            raise RecipeError(f"{source}: {speedups} is neither a YAML file nor a preset ({', '.join(preset_names())})")
        data, origins = load_with_bases(path)
        unknown = unknown_top_keys(data, origins)
        if unknown:  # a misspelt `speedups:` would read as no speed-ups at all
            raise RecipeError(
                f"{source}: {path}: only its `speedups:` section is read, and any other key must be one a recipe has:\n"
                + "\n".join(f"  - {problem}" for problem in unknown)
            )
        section = data.get("speedups", {})
        if not isinstance(section, dict):
            raise RecipeError(f"{origins.where(('speedups',))}: `speedups` must be a mapping of speed-ups")
        return section, origins
    raise RecipeError(
        f"{source}: give a mapping (as a recipe's `speedups:` section), a preset name or a YAML file, "
        f"not {type(speedups).__name__}"
    )


def _validated(data: dict, origins: Origins) -> Settings:
    problems = [
        f"{origins.where((key,))}: `{key}` is not an engine setting{did_you_mean(key, KEYS)}. "
        f"Engine settings: {', '.join(KEYS)} (speed-ups as `speedups.NAME.OPTION`)."
        for key in data
        if key not in KEYS
    ]
    strategy = data.get("strategy")
    if strategy not in (None, *STRATEGIES):
        problems.append(
            f"{origins.where(('strategy',))}: `strategy` = {strategy!r}: one of {', '.join(STRATEGIES)} "
            "(or none: ddp when torchrun starts several processes)"
        )
    if data.get("optimizer") not in (None, *OPTIMIZERS):
        problems.append(
            f"{origins.where(('optimizer',))}: `optimizer` = {data['optimizer']!r}: {', '.join(OPTIMIZERS)} (Muon "
            "on the hidden matrices, AdamW on the rest, from the loop's own optimizer), or none: the loop's own"
        )
    if not isinstance(data.get("speedups"), dict):
        problems.append(f"{origins.where(('speedups',))}: `speedups` must be a mapping of speed-ups")
    else:
        validate_speedups(data, origins, problems)
    if problems:
        raise RecipeError("Invalid engine settings:\n" + "\n".join(f"  - {p}" for p in problems))
    return Settings(data["speedups"], str(data.get("device") or "auto"), strategy, data.get("optimizer"))
