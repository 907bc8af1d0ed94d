"""What `accel tune` tries: the knobs of a recipe on a device, and the candidates a model can use.

Speed-up knobs come first and their first value is the speed-up off: another value is kept only when it
measurably beats off (the simpler setting wins a tie). Cheap knobs (batch size, workers, threads) compare with
the recipe's own value. Candidates the device cannot run (the speed-up's own `unavailable` check) or the model
cannot use (channels_last without convolutions, an attention kernel without attention, regional compile
without repeated blocks) are dropped with the reason, once the first trials have reported the model's traits.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..data.loaders import available_cpus
from ..errors import AccelError
from ..recipe import Recipe
from ..recipe_yaml import parse_value
from ..registry import SPEEDUPS
from .variants import format_value, vary_variants

BATCH_KEY, WORKERS_KEY = "data.batch_size", "data.loader.num_workers"
THREAD_FIELDS = ("num_threads", "threads", "intra_op_threads", "intra_op")  # how a `threads` speed-up may name it
OFF = {"enabled": False}
# Speed-up candidates, in search order (each measured on top of the choices before it): the numeric
# formats first, since layout, kernels and compilation are best judged in the dtype the run will use;
# compile last of them, since it compiles whatever the others chose. `needs`: a model trait. Never `jit`:
# TorchScript is deprecated upstream (PyTorch 2.10), and compile is tried instead.
SPEEDUP_CANDIDATES: list[tuple[str, list[dict], str | None]] = [
    ("amp", [{"dtype": "bf16"}, {"dtype": "fp16"}], None),
    ("channels_last", [{}], "has_conv"),
    ("attention", [{"backend": "flash"}, {"backend": "efficient"}, {"backend": "cudnn"}], "has_attention"),
    ("optim", [{"impl": "fused"}, {"impl": "foreach"}], None),
    ("float8", [{}], None),
    ("compile", [{}, {"regional": True}, {"mode": "max-autotune"}], None),
]
NEEDS_OF_VALUE = {("compile", "regional"): "repeated_blocks"}
TRAITS = {"has_conv": "convolutions", "has_attention": "attention modules", "repeated_blocks": "repeated blocks"}
CUDA_ONLY = {("compile", "mode")}  # max-autotune's kernel search pays off on GPUs; on CPUs it only costs time


@dataclass
class Knob:
    """A recipe key and the values to try, with a label for each. `bounded`: ascending, and the first failure
    ends the search. `speedup`: the first value is the speed-up off, the reference the others must beat.
    `needs`: the model trait each value needs (None: none)."""

    key: str
    values: list[Any]
    bounded: bool = False
    speedup: bool = False
    labels: list[str] = field(default_factory=list)
    needs: list[str | None] = field(default_factory=list)

    def label(self, value: Any) -> str:
        return self.labels[self.values.index(value)] if self.labels else format_value(value)


def speedup_knobs(base: Recipe, device: torch.device) -> list[Knob]:
    """One knob per speed-up tune knows, each value the recipe's section with the candidate's settings."""
    sections = base.dump()["speedups"]
    knobs = []
    for name, patches, needs in SPEEDUP_CANDIDATES:
        section = {k: v for k, v in (sections.get(name) or {}).items() if k != "enabled"}
        values, labels, value_needs = [section | OFF], ["off"], [None]
        for patch in patches:
            value = section | patch | {"enabled": True}
            if value in values or _why_not_here(name, patch, value, device):
                continue
            values.append(value)
            labels.append(",".join(f"{k}={format_value(v)}" for k, v in patch.items()) or "on")
            value_needs.append(next((NEEDS_OF_VALUE[(name, k)] for k in patch if (name, k) in NEEDS_OF_VALUE),
                                    needs))
        if len(values) > 1:
            knobs.append(Knob(f"speedups.{name}", values, speedup=True, labels=labels, needs=value_needs))
    return knobs


def _why_not_here(name: str, patch: dict, value: dict, device: torch.device) -> str | None:
    """Why the speed-up with `value` cannot run on `device` (its own check), or None."""
    if name not in SPEEDUPS:
        return "not installed"
    if device.type != "cuda" and any((name, k) in CUDA_ONLY for k in patch):
        return "pays off on GPUs only"
    speedup = SPEEDUPS.get(name)
    cfg = speedup.Config(**{k: v for k, v in value.items() if k != "enabled"})
    return speedup(cfg).unavailable(device)


def usable(knob: Knob, traits: dict[str, bool]) -> list[Any]:
    """The values of `knob` the model can use, given the traits the first trials reported (all when unknown)."""
    needs = knob.needs or [None] * len(knob.values)
    return [v for v, need in zip(knob.values, needs) if need is None or traits.get(need, True)]


def threads_key() -> str | None:
    """The recipe key of the `threads` speed-up's thread count, or None when no such speed-up is registered."""
    if "threads" not in SPEEDUPS:
        return None
    fields = getattr(SPEEDUPS.get("threads").Config, "model_fields", {})
    return next((f"speedups.threads.{name}" for name in THREAD_FIELDS if name in fields), None)


def _listed(text: str | None, default: list[Any]) -> list[Any]:
    # None: the flag was not given, use the default; "" (e.g. --threads=): skip this knob.
    if text is None:
        return default
    return [parse_value(part) for part in text.split(",") if part.strip()]


def build_knobs(base: Recipe, batch_sizes: str | None = None, workers: str | None = None,
                threads: str | None = None, tries: list[str] = (), speedups: bool = False,
                device: torch.device | None = None) -> list[Knob]:
    """The knobs to search, in order, with default candidates derived from the recipe and this machine's cores;
    with `speedups`, the speed-up knobs first."""
    b, cpus = base.data.batch_size, available_cpus()
    knobs = speedup_knobs(base, device or torch.device("cpu")) if speedups else []
    knobs += [Knob(BATCH_KEY, _listed(batch_sizes, [max(1, b // 2), b, 2 * b, 4 * b]), bounded=True),
              Knob(WORKERS_KEY, _listed(workers, [n for n in (0, 1, 2, 4) if n <= cpus]))]
    key = threads_key()
    counts = sorted({n for n in (1, 2, 4, 8, 16, 32) if n <= cpus} | {cpus})
    if key is not None:
        knobs.append(Knob(key, _listed(threads, counts)))
    elif threads:
        raise AccelError("--threads needs a registered `threads` speed-up with a thread-count option; "
                         "none is installed. Use --try KEY=V1,V2 for the key your setup uses.")
    for item in tries:
        variants = vary_variants([item])
        knobs.append(Knob(next(iter(variants[0].overrides)), [v.overrides[k] for v in variants for k in v.overrides]))
    for knob in knobs:
        if knob.bounded and not all(isinstance(v, int) and v > 0 for v in knob.values):
            raise AccelError(f"{knob.key} candidates must be positive integers, got {knob.values}.")
    return [k for k in knobs if k.values]
