"""The speed-up interface the trainer drives. Every hook does nothing by default, so the loop stays plain."""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from pydantic import Field

from ..schema import StrictModel

if TYPE_CHECKING:
    from ..trainer import Trainer


class SpeedupConfig(StrictModel):
    enabled: bool = Field(True, description="false gives exactly the code path of not listing the speed-up")


class Speedup:
    """One speed-up: a thin class around the pure functions that do the work.

    `order` sorts setup: lower runs first (device and memory layout), compile last. At most one active
    speed-up may set `owns_step` and override `backward` / `optimizer_step` (a GradScaler, XLA).
    """

    name: ClassVar[str]
    order: ClassVar[int] = 50
    owns_step: bool = False  # an instance may set it in __init__ (amp: only fp16 owns the step)
    Config: ClassVar[type[SpeedupConfig]] = SpeedupConfig

    def __init__(self, cfg: SpeedupConfig | None = None):
        self.cfg = cfg if cfg is not None else self.Config()

    def unavailable(self, device: torch.device) -> str | None:
        """Why this speed-up cannot run on `device`, or None when it can."""
        return None

    def unavailable_beside(self, device: torch.device, others: list["Speedup"]) -> str | None:
        """Why this speed-up cannot run on `device` beside the `others` that will, or None when it can."""
        return None

    def sharding_conflict(self) -> str | None:
        """Why this speed-up cannot run on a model sharded with `strategy: fsdp`, or None when it can."""
        return None

    def setup(self, trainer: "Trainer") -> None:
        """Transform the model, optimizer or loaders once, before the first step."""

    def prepare_batch(self, inputs: torch.Tensor) -> torch.Tensor:
        """Change each input batch on the device (e.g. its memory format)."""
        return inputs

    def step_context(self) -> AbstractContextManager:
        """Wraps forward and loss (e.g. autocast)."""
        return nullcontext()

    def eval_context(self) -> AbstractContextManager:
        """Wraps a whole evaluation pass (e.g. swapping in averaged weights)."""
        return nullcontext()

    def backward(self, loss: torch.Tensor, trainer: "Trainer") -> None:
        loss.backward()

    def optimizer_step(self, trainer: "Trainer") -> bool:
        """Clip and step; return False when the step was skipped (e.g. inf gradients)."""
        trainer.clip_gradients()
        trainer.optimizer.step()
        return True

    def metrics(self) -> dict[str, Any]:
        """Numbers worth a line in metrics.jsonl and summary.json (e.g. skipped steps, recompilations)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def teardown(self) -> None:
        """Restore every global flag setup changed, so runs in one process do not leak into each other."""
