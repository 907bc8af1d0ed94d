"""What `accel tune` tries: the knobs of a recipe on a device, and the candidates a model can use.

Speed-up knobs come first and their first value is the speed-up off: another value is kept only when it
measurably beats off (the simpler setting wins a tie). Each speed-up declares its own candidates (`tune`) and
the model trait it needs (`needs`), so a registered speed-up is tuned with no edit here. Cheap knobs (batch
size, workers, threads) compare with the recipe's own value. Candidates the device cannot run (the speed-up's
own `conflict`) or the model cannot use (channels_last without convolutions, an attention kernel without
attention, regional compile without repeated blocks) are dropped with the reason, once the first trials have
reported the model's traits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..config.recipe import Recipe
from ..config.recipe_yaml import parse_value
from ..devices import available_cpus
from ..errors import AccelError
from ..models.blocks import TRAITS as MODEL_TRAITS
from ..registry import SPEEDUPS
from ..speedups import Candidate, Context, Phase, Speedup
from .variants import format_value, value_label, vary_variants

BATCH_KEY, WORKERS_KEY, LR_KEY, OPTIMIZER_KEY = "data.batch_size", "data.loader.num_workers", "optim.lr", "optim.name"
OPTIM_SPEEDUP_KEY = "speedups.optim"
OFF = {"enabled": False}
TRAITS = {trait: words for trait, (words, _) in MODEL_TRAITS.items()}


def tuned_speedups() -> list[type[Speedup]]:
    """The registered speed-ups with tune candidates, in search order (each measured on top of the choices
    before it): the numeric formats first, since layout, kernels and compilation are best judged in the dtype
    the run will use; then in setup order, so compile comes last and compiles whatever the others chose."""
    classes = [SPEEDUPS.get(name) for name in SPEEDUPS.names()]
    return sorted((c for c in classes if c.tune), key=lambda c: (c.phase is not Phase.PRECISION, c.phase, c.name))


@dataclass
class Knob:
    """A recipe key and the values to try, with a label for each. `bounded`: ascending, and the first failure
    ends the search. `speedup`: the first value is the speed-up off, the reference the others must beat.
    `needs`: the model trait each value needs (None: none). `couple`: other keys a value changes with it, given
    the choices so far and the recipe (a batch size carries its learning rate). `range_test`: the candidates
    come from a learning-rate range test run when the knob's stage starts."""

    key: str
    values: list[Any]
    bounded: bool = False
    speedup: bool = False
    labels: list[str] = field(default_factory=list)
    needs: list[str | None] = field(default_factory=list)
    couple: Callable[[Any, dict[str, Any], dict], dict[str, Any]] | None = None
    range_test: bool = False
    guard: bool = False  # a value must leave the training loss as it was (as a speed-up's must): a speed flag
    # a number whose winner at the end of its candidates is taken a step further, this factor on, while the end
    # wins (a script's learning rate: twice the winner again; accel.bench.tune.search._next_rung)
    ladder: float | None = None

    def label(self, value: Any) -> str:
        if self.labels and value in self.values:
            return self.labels[self.values.index(value)]
        return value_label(self.key, value)


def speedup_knobs(sections: dict[str, Any], device: torch.device) -> list[Knob]:
    """One knob per speed-up tune knows, each value the given section (a recipe's `speedups:`, or what a
    script's engine was given) with the candidate's settings."""
    knobs = []
    for speedup in tuned_speedups():
        name = speedup.name
        section = {k: v for k, v in (sections.get(name) or {}).items() if k != "enabled"}
        values, labels, value_needs = [section | OFF], ["off"], [None]
        for candidate in speedup.tune:
            value = section | candidate.patch | {"enabled": True}
            if value in values or _why_not_here(speedup, candidate, value, device):
                continue
            values.append(value)
            labels.append(",".join(f"{k}={format_value(v)}" for k, v in candidate.patch.items()) or "on")
            value_needs.append(candidate.needs or speedup.needs)
        if len(values) > 1:
            knobs.append(Knob(f"speedups.{name}", values, speedup=True, labels=labels, needs=value_needs))
    return knobs


def _why_not_here(speedup: type[Speedup], candidate: Candidate, value: dict, device: torch.device) -> str | None:
    """Why the speed-up with `value` cannot run on `device` (its own check), or None."""
    if device.type != "cuda" and candidate.cuda_only:
        return "pays off on GPUs only"
    cfg = speedup.Config(**{k: v for k, v in value.items() if k != "enabled"})
    return speedup(cfg).conflict(Context(device))


def runnable_speedups(given: dict[str, Any], device: torch.device, traits: dict[str, bool] | None) -> dict[str, dict]:
    """The speed-ups tune would try that `given` (a `speedups:` section) lacks, each as the section of its first
    candidate this device can run and the model can use (`traits` None: not known, every need counted as met):
    what `accel bench --ablate` of a script adds to the speed-ups the script gave its engine. One the section
    names, even turned off, is the user's choice and is not added."""
    added = {}
    for speedup in tuned_speedups():
        if speedup.name in given:
            continue
        for candidate in speedup.tune:
            value = {"enabled": True, **candidate.patch}
            need = candidate.needs or speedup.needs
            fits = need is None or (traits or {}).get(need, True)
            if fits and not _why_not_here(speedup, candidate, value, device):
                added[speedup.name] = value
                break
    return added


def usable(knob: Knob, traits: dict[str, bool]) -> list[Any]:
    """The values of `knob` the model can use, given the traits the first trials reported (all when unknown)."""
    needs = knob.needs or [None] * len(knob.values)
    return [v for v, need in zip(knob.values, needs) if need is None or traits.get(need, True)]


def threads_key() -> str | None:
    """The recipe key of the thread count a registered speed-up declares (`thread_count`), or None."""
    classes = [SPEEDUPS.get(name) for name in SPEEDUPS.names()]
    return next((f"speedups.{cls.name}.{cls.thread_count}" for cls in classes if cls.thread_count), None)


def lookup(data: dict, key: str) -> Any:
    """The value at a dotted key of plain recipe data, or None when it is not there (a script's option is one
    key, dots and all: `arg:--trainer.precision`)."""
    if key in data:
        return data[key]
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def current(key: str, chosen: dict[str, Any], plain: dict) -> Any:
    """A key's value as the search stands: chosen so far, else the recipe's."""
    return chosen[key] if key in chosen else lookup(plain, key)


def lr_for_batch(batch: int, chosen: dict[str, Any], plain: dict) -> dict[str, Any]:
    """The learning rate scaled with the batch size: linearly for SGD (Goyal et al., 2017), by the square root
    for the adaptive optimizers (Malladi et al., 2022), whose steps do not grow with the gradient's size."""
    before = current(BATCH_KEY, chosen, plain)
    lr = current(LR_KEY, chosen, plain)
    if batch == before:
        return {LR_KEY: lr}
    power = 1.0 if current(OPTIMIZER_KEY, chosen, plain) == "sgd" else 0.5
    return {LR_KEY: float(f"{lr * (batch / before) ** power:.4g}")}


def muon_beside_the_kernel(value: Any, chosen: dict[str, Any], plain: dict) -> dict[str, Any]:
    """Muon with a fused `optim` speed-up chosen before it carries `impl: auto` (the fused kernel where it works:
    Muon has none), so the search does not refuse a candidate for a choice of its own."""
    section = current(OPTIM_SPEEDUP_KEY, chosen, plain)
    fused = isinstance(section, dict) and section.get("enabled", True) and section.get("impl") == "fused"
    if value == "muon" and fused:
        return {OPTIM_SPEEDUP_KEY: {**section, "impl": "auto"}}
    return {}


def time_knobs(
    base: Recipe,
    batch_sizes: str | None = None,
    tries: list[str] = (),
    speedups: bool = False,
    device: torch.device | None = None,
) -> list[Knob]:
    """`tune --objective time`: with `speedups`, the speed-up knobs first (searched by samples/s, then run together
    to the target: accel/bench/tune/levers.py); then the knobs that change learning, in order. The optimizer
    (Muon on the hidden matrices against the recipe's), then the learning rate (a range test proposes the
    candidate), then the batch size with the learning rate scaled to it. Workers and threads change only speed:
    tune them with the speed objective."""
    b = base.data.batch_size
    knobs = speedup_knobs(base.dump()["speedups"], device or torch.device("cpu")) if speedups else []
    knobs += [Knob(OPTIMIZER_KEY, ["muon"], couple=muon_beside_the_kernel)] if base.optim.name != "muon" else []
    knobs += [
        Knob(LR_KEY, [], range_test=True),
        Knob(BATCH_KEY, _listed(batch_sizes, [max(1, b // 2), b, 2 * b]), bounded=True, couple=lr_for_batch),
    ]
    return knobs + _tried(tries)


def _tried(tries: list[str]) -> list[Knob]:
    knobs = []
    for item in tries:
        variants = vary_variants([item])
        knobs.append(Knob(next(iter(variants[0].overrides)), [v.overrides[k] for v in variants for k in v.overrides]))
    return knobs


def _listed(text: str | None, default: list[Any]) -> list[Any]:
    # None: the flag was not given, use the default; "" (e.g. --threads=): skip this knob.
    if text is None:
        return default
    return [parse_value(part) for part in text.split(",") if part.strip()]


def build_knobs(
    base: Recipe,
    batch_sizes: str | None = None,
    workers: str | None = None,
    threads: str | None = None,
    tries: list[str] = (),
    speedups: bool = False,
    device: torch.device | None = None,
) -> list[Knob]:
    """The knobs to search, in order, with default candidates derived from the recipe and this machine's cores;
    with `speedups`, the speed-up knobs first."""
    b, cpus = base.data.batch_size, available_cpus()
    knobs = speedup_knobs(base.dump()["speedups"], device or torch.device("cpu")) if speedups else []
    knobs += [
        Knob(BATCH_KEY, _listed(batch_sizes, [max(1, b // 2), b, 2 * b, 4 * b]), bounded=True),
        Knob(WORKERS_KEY, _listed(workers, [n for n in (0, 1, 2, 4) if n <= cpus])),
    ]
    key = threads_key()
    counts = sorted({n for n in (1, 2, 4, 8, 16, 32) if n <= cpus} | {cpus})
    if key is not None:
        knobs.append(Knob(key, _listed(threads, counts)))
    elif threads:
        raise AccelError(
            "--threads needs a registered speed-up that declares a thread count (`thread_count`); "
            "none is installed. Use --try KEY=V1,V2 for the key your setup uses."
        )
    knobs += _tried(tries)
    for knob in knobs:
        if knob.bounded and not all(isinstance(v, int) and v > 0 for v in knob.values):
            raise AccelError(f"{knob.key} candidates must be positive integers, got {knob.values}.")
    return [k for k in knobs if k.values]
