"""A hand-written loop's scheduler, given to `eng.setup(model, optimizer, scheduler)`: the loop steps it, as in
plain PyTorch, whether its step is its own (`eng.backward`, `optimizer.step()`) or `compile_step`'s; the engine never
does (it steps only the Trainer's). Given, it tells the conflict rule the run is scheduled, and the engine watches
it: advanced more than once between two optimizer steps, its learning rate falls faster than the loop means, which
is said once (a loop that also stepped a schedule accel stepped once fell to 1/256 in 4 steps instead of 1/16)."""

from __future__ import annotations

import logging
from typing import Any

from .core import Observer

log = logging.getLogger("accel")
DOUBLE_STEP = (
    "the scheduler given to eng.setup ({name}) advanced {times} times between two optimizer steps: step it once "
    "after each optimizer.step() (or once an epoch), in one place. accel never steps a hand-written loop's "
    "scheduler; a second scheduler.step() (another callback, or one per micro-batch under grad_accum) makes the "
    "learning rate fall that many times faster"
)


class ScheduleWatch(Observer):
    """Says a double step of the loop's scheduler, from its position (`last_epoch`) at each optimizer step."""

    def __init__(self, scheduler: Any):
        self.scheduler, self.said = scheduler, False
        self.position = _position(scheduler)

    def stepped(self) -> None:
        """An optimizer step ended (the loop steps its scheduler after it)."""
        now = _position(self.scheduler)
        if now is None or self.position is None:
            return
        if now - self.position > 1 and not self.said:
            self.said = True
            log.warning(DOUBLE_STEP.format(name=type(self.scheduler).__name__, times=now - self.position))
        self.position = now


def _position(scheduler: Any) -> int | None:
    """How often the scheduler has stepped (torch's schedulers count it in `last_epoch`); None if it does not say."""
    position = getattr(scheduler, "last_epoch", None)
    return position if isinstance(position, int) else None
