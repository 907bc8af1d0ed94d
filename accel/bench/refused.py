"""The one conflict rule asked of a bench's variants and tune's candidates before any trial: one the rule refuses
beside the other choices (the device and the run's own choices, accel.speedups.RunFacts) is recorded refused with
the reason, not paid a trial to fail at setup."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn

from ..config.recipe import Recipe
from ..devices import cuda_available, resolve_device, xla_requested
from ..errors import AccelError
from ..optimizers.builders import build_optimizer, build_scheduler
from ..optimizers.traits import OptimizerTraits, optimizer_traits
from ..quiet import quiet_logs
from ..registry import OPTIMIZERS, SPEEDUPS
from ..speedups import RunFacts, Speedup, from_configs, precision_of, refusals, skipped
from ..strategy import Strategy

STANDIN_STEPS = 100  # a schedule's length for the stand-in optimizer: only whether one is built matters


def refused(speedups: list[Speedup], device: torch.device, run: RunFacts) -> list[str]:
    """What the rule would refuse of these speed-ups in a trial (one process: the plain strategy), all at once."""
    strategy = Strategy()
    left_out = skipped(speedups, device, strategy)
    active = [s for s in speedups if s.name not in left_out]
    return refusals(active, device, strategy, precision_of(active).name, run)


def recipe_refusals(recipe: Recipe) -> list[str]:
    """What the rule refuses of a resolved recipe, on the device its trials will run on; nothing when that device
    is missing here (every trial then fails saying so)."""
    device = trial_device(recipe.device)
    return refused(from_configs(recipe.speedups), device, recipe_facts(recipe, device)) if device else []


def trial_device(spec: str) -> torch.device | None:
    """The device the trials will resolve `spec` to, without starting its runtime in this process (the rule reads
    only its type; an XLA runtime started here would hold the device); None when it is missing."""
    if spec.split(":")[0] == "xla" or (spec == "auto" and not cuda_available() and xla_requested()):
        return torch.device("xla")
    try:
        return resolve_device(spec)
    except AccelError:
        return None


def script_refusals(given: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """What the rule refuses of a script's variant (`config`: its resolved settings), judged by the run's facts the
    probe read from the script's engine (`given`; none known: none refused for them), the optimizer the variant
    swaps in (tune's `optimizer=muon`: a fused kernel chosen before it has none for Muon) judged on a stand-in."""
    device, facts = script_device(given), RunFacts.from_data(given.get("run"))
    swapped = config.get("optimizer")
    if swapped and swapped != given.get("optimizer"):
        optimizer = _standin(OPTIMIZERS.get(swapped).Config())
        facts = replace(facts, optimizer=_traits(optimizer, device))
    return refused(built(config["speedups"]), device, facts)


def script_device(given: dict[str, Any]) -> torch.device:
    """The device the script's engine resolved, as the probe read it (`given`); the CPU when it said none."""
    return torch.device(given.get("resolved_device") or "cpu")


def new_refusals(refusals: dict[str, list[str]], baseline: str) -> dict[str, str]:
    """The variants the rule refuses (name -> reason) beyond what it refuses of the baseline too: that refusal is
    the recipe's or script's own, and the baseline's trial fails and says so."""
    own = set(refusals[baseline])
    found = {}
    for name, reasons in refusals.items():
        new = [r for r in reasons if r not in own] if name != baseline else []
        if new:
            found[name] = " ".join(new)  # each a sentence of its own
    return found


def built(section: dict[str, dict[str, Any]]) -> list[Speedup]:
    """The enabled speed-ups of a `speedups:` section given as plain data (a script's resolved settings)."""
    speedups = []
    for name, data in section.items():
        cls = SPEEDUPS.get(name)
        cfg = cls.Config(**data)
        if cfg.enabled:
            speedups.append(cls(cfg))
    return speedups


def recipe_facts(recipe: Recipe, device: torch.device) -> RunFacts:
    """What the recipe's run would tell the rule before setup, from the recipe alone: its optimizer and schedule
    are built on a stand-in module on the CPU (two blocks, for Muon; whether a fused kernel works on another device
    stays unknown)."""
    optimizer = _standin(recipe.optim)
    try:
        scheduler = build_scheduler(recipe.schedule, optimizer, total_steps=STANDIN_STEPS, steps_per_epoch=10)
    except Exception:  # noqa: BLE001 - no optimizer, or a schedule it cannot take: no schedule known
        scheduler = None
    return RunFacts(
        grad_accum=recipe.train.grad_accum,
        drop_last=recipe.data.drop_last,
        optimizer=_traits(optimizer, device),
        scheduled=scheduler is not None,
        task=recipe.task.name,
    )


def _standin(cfg: Any) -> torch.optim.Optimizer | None:
    """The optimizer `cfg` builds on a stand-in module on the CPU (two blocks, for Muon); None when it refuses the
    stand-in (its parameter patterns), which then says nothing."""
    try:
        with quiet_logs("accel"):  # its notes (Muon's matrices and dtype) are about the stand-in, not the run
            return build_optimizer(cfg, nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)))
    except Exception:  # noqa: BLE001
        return None


def _traits(optimizer: torch.optim.Optimizer | None, device: torch.device) -> OptimizerTraits | None:
    """A stand-in's traits: whether a fused kernel works is known for the CPU only, where the stand-in is."""
    return optimizer_traits(optimizer, fused_known=device.type == "cpu") if optimizer is not None else None
