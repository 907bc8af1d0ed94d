"""The one conflict rule: from each speed-up's own `conflict`, which of a run's speed-ups run, which are skipped
and which refuse the run; and the order they are set up in."""

from __future__ import annotations

import logging
from dataclasses import replace

import torch

from ..errors import AccelError, SpeedupUnavailable
from ..strategy.base import Strategy
from ..strategy.precision import Precision
from .base import NOTHING_KNOWN, Context, RunFacts, Speedup

log = logging.getLogger("accel")


def setup_order(speedups: list[Speedup]) -> list[Speedup]:
    """By phase, then by name: deterministic whatever order the recipe lists them in."""
    return sorted(speedups, key=lambda s: (s.phase, s.name))


def precision_of(speedups: list[Speedup]) -> Precision:
    """The precision the speed-ups give the strategy (amp's), else fp32."""
    return next((p for s in speedups if (p := s.precision()) is not None), Precision())


def given_context(device: torch.device, strategy: Strategy, precision: str | None = None) -> Context:
    """What cannot give way: the device, the precision that runs there and a strategy that follows the device."""
    return Context(device, precision, strategy.name if strategy.follows_device else "plain")


def skipped(speedups: list[Speedup], device: torch.device, strategy: Strategy) -> dict[str, str]:
    """Name -> reason of each speed-up whose `conflict` names the device, the precision that runs there or a
    strategy that follows the device: nothing in the recipe can make it run here."""
    bare = given_context(device, strategy)
    precision = precision_of([s for s in speedups if s.precision() is not None and s.conflict(bare) is None])
    given = replace(bare, precision=precision.name)
    return {s.name: reason for s in speedups if (reason := s.conflict(given)) is not None}


def resolve(
    speedups: list[Speedup], device: torch.device, strategy: Strategy, strict: bool = False
) -> tuple[list[Speedup], dict[str, str]]:
    """The one conflict rule, first half: the `skipped` speed-ups are left out with their reason (an error under
    `strict`). The rest, in setup order; `refusals` then checks them against the recipe's choices."""
    left_out = skipped(speedups, device, strategy)
    for name, reason in left_out.items():
        if strict:
            raise SpeedupUnavailable(f"speed-up `{name}` cannot run here: {reason} (strict mode).")
        log.warning("skipping speed-up %s: %s", name, reason)
    return setup_order([s for s in speedups if s.name not in left_out]), left_out


def refusals(
    speedups: list[Speedup],
    device: torch.device,
    strategy: Strategy,
    precision: str | None = None,
    run: RunFacts = NOTHING_KNOWN,
) -> list[str]:
    """The one conflict rule, second half: reasons that only the recipe's own choices give (its strategy, the
    other speed-ups it enables, its `run` facts: accumulation, the loader, the optimizer). Those refuse the run,
    all named at once, before anything is set up: the recipe asked for both, so dropping one quietly would run
    something else than it says."""
    given = given_context(device, strategy, precision)
    chosen = replace(given, strategy=strategy.name, run=run)
    problems = []
    for speedup in speedups:
        reason = speedup.conflict(replace(chosen, others=tuple(o for o in speedups if o is not speedup)))
        if reason is not None and reason != speedup.conflict(given):
            problems.append(f"`speedups.{speedup.name}`: {reason}")
    return problems


def refuse(
    speedups: list[Speedup],
    device: torch.device,
    strategy: Strategy,
    precision: str | None = None,
    script: bool = False,
    run: RunFacts = NOTHING_KNOWN,
) -> None:
    """Raise the refusals, if any, as one error that says how to fix the recipe (or, `script`, the settings a
    hand-written loop gave its engine)."""
    problems = refusals(speedups, device, strategy, precision, run)
    if not problems:
        return
    source, setting = ("the engine's", "ACCEL_SET=") if script else ("the recipe's", "--set ")
    other = f" or use another strategy than `{strategy.name}` (`strategy: ddp` keeps a whole model per process)"
    raise AccelError(
        f"these speed-ups cannot run with {source} other choices"
        + (f" (strategy: {strategy.name})" if not strategy.follows_device else "")
        + ":\n"
        + "\n".join(f"  - {p}" for p in problems)
        + f"\nDisable them (`{setting}speedups.NAME.enabled=false`)"
        + (other if not strategy.follows_device else "")
        + "."
    )
