"""`ema`: an exponential moving average of the weights, evaluated instead of the raw weights and checkpointed.

The average is updated from an optimizer step post-hook, so it follows exactly the steps that were applied: a
step the GradScaler skipped for inf gradients is not averaged in, and no trainer hook is needed for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import torch
from pydantic import Field
from torch import nn

from .base import Context, Phase, Speedup, SpeedupConfig, registered

if TYPE_CHECKING:
    from ..strategy.slots import Slots


def live_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """The module's parameters and persistent buffers by name, as the live tensors (not copies)."""
    return module.state_dict(keep_vars=True)


def decay_at(decay: float, updates: int, warmup: bool) -> float:
    """The decay for update number `updates` (0-based); warm-up lets early averages forget the random init."""
    return min(decay, (1 + updates) / (10 + updates)) if warmup else decay


@torch.no_grad()
def update_ema(shadow: dict[str, torch.Tensor], live: dict[str, torch.Tensor], decay: float) -> None:
    """shadow <- decay * shadow + (1 - decay) * live for floating tensors; counters such as BatchNorm's
    num_batches_tracked are copied."""
    floats = [name for name, tensor in shadow.items() if tensor.is_floating_point()]
    torch._foreach_lerp_([shadow[n] for n in floats], [live[n].detach() for n in floats], 1.0 - decay)
    for name in shadow.keys() - set(floats):
        shadow[name].copy_(live[name])


@contextmanager
def swapped_in(live: dict[str, torch.Tensor], shadow: dict[str, torch.Tensor]) -> Iterator[None]:
    """Copy `shadow` into the live tensors for the duration, then put the originals back. Copying in place
    (not rebinding) keeps every wrapper of the module, compiled or scripted, pointing at the same tensors."""
    with torch.no_grad():
        backup = {name: tensor.detach().clone() for name, tensor in live.items()}
        for name, tensor in live.items():
            tensor.copy_(shadow[name])
    try:
        yield
    finally:
        with torch.no_grad():
            for name, tensor in live.items():
                tensor.copy_(backup[name])


@registered("ema")
class Ema(Speedup):
    """Exponential moving average of the weights: evaluated instead of the raw weights, saved in checkpoints."""

    phase = Phase.WEIGHTS  # after speed-ups that may rebuild the optimizer, before jit/compile wrap the model

    class Config(SpeedupConfig):
        decay: float = Field(
            0.999,
            ge=0,
            le=1,
            description="weight of the old average at each update; the average spans roughly 1 / (1 - decay) updates",
        )
        warmup: bool = Field(
            True,
            description="use min(decay, (1 + n) / (10 + n)) at update n, so short runs are "
            "not dominated by the random initial weights",
        )
        every_steps: int = Field(
            1,
            ge=1,
            description="update every N optimizer steps (cheaper on big models; `decay` then applies per update)",
        )
        evaluate: bool = Field(
            True, description="evaluate with the averaged weights (false: only keep and checkpoint them)"
        )

    def __init__(self, cfg: Ema.Config | None = None):
        super().__init__(cfg)
        self.shadow: dict[str, torch.Tensor] | None = None
        self.updates = 0
        self._live: dict[str, torch.Tensor] = {}
        self._handle: Any = None
        self._steps = 0

    def conflict(self, context: Context) -> str | None:
        if context.strategy == "fsdp":
            return "the average would be held as sharded tensors, which checkpoints do not store"
        return None

    def setup(self, engine: Slots) -> None:
        self._live = live_tensors(engine.module)
        self.shadow = {name: tensor.detach().clone() for name, tensor in self._live.items()}
        self._steps = 0
        self._handle = engine.optimizer.register_step_post_hook(self._after_step)

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._steps += 1
        if self._steps % self.cfg.every_steps == 0:
            update_ema(self.shadow, self._live, decay_at(self.cfg.decay, self.updates, self.cfg.warmup))
            self.updates += 1

    def eval_context(self) -> AbstractContextManager:
        """Evaluation sees the averaged weights; training resumes with its own afterwards."""
        if self.shadow is None or not self.cfg.evaluate:
            return nullcontext()
        return swapped_in(self._live, self.shadow)

    def metrics(self) -> dict[str, Any]:
        return {"updates": self.updates}

    @classmethod
    def evaluated_weights(cls, cfg: Ema.Config, state: dict[str, Any]) -> dict[str, Any] | None:
        return state["shadow"] if state.get("shadow") is not None and cfg.evaluate else None

    def state_dict(self) -> dict[str, Any]:
        if self.shadow is None:
            return {}
        return {"updates": self.updates, "shadow": {name: t.detach().clone() for name, t in self.shadow.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:  # a checkpoint from a run without ema: start averaging from the loaded weights
            return
        with torch.no_grad():
            for name, tensor in self.shadow.items():
                tensor.copy_(state["shadow"][name])
        self.updates = state["updates"]

    def teardown(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
