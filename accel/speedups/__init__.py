"""Speed-ups, one module each, registered under the name a recipe uses in `speedups:`."""
from __future__ import annotations

import importlib
import logging
import pkgutil

import torch

from ..errors import AccelError, SpeedupUnavailable
from ..registry import SPEEDUPS
from .base import Speedup, SpeedupConfig

log = logging.getLogger("accel")

# Every module in this package registers its speed-up on import: adding a file is all it takes.
for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Speedup", "SpeedupConfig", "from_configs", "select_available", "SPEEDUPS"]


def from_configs(configs: dict[str, SpeedupConfig]) -> list[Speedup]:
    """The enabled speed-ups of a recipe's `speedups:` section; a disabled one is simply not built."""
    return [SPEEDUPS.get(name)(cfg) for name, cfg in configs.items() if cfg.enabled]


def select_available(speedups: list[Speedup], device: torch.device, strict: bool = False
                     ) -> tuple[list[Speedup], dict[str, str]]:
    """Keep the speed-ups that can run on `device`, and then beside each other (attention kernels need amp), in
    setup order; the others are skipped with a reason."""
    skipped: dict[str, str] = {}

    def keep(speedup: Speedup, reason: str | None) -> bool:
        if reason is not None and strict:
            raise SpeedupUnavailable(f"speed-up `{speedup.name}` cannot run here: {reason} (strict mode).")
        if reason is not None:
            log.warning("skipping speed-up %s: %s", speedup.name, reason)
            skipped[speedup.name] = reason
        return reason is None

    active = [s for s in speedups if keep(s, s.unavailable(device))]
    active = [s for s in active if keep(s, s.unavailable_beside(device, [o for o in active if o is not s]))]
    owners = [s.name for s in active if s.owns_step]
    if len(owners) > 1:
        raise AccelError(f"speed-ups {', '.join(owners)} each want to own backward/optimizer step; enable one.")
    return sorted(active, key=lambda s: s.order), skipped
