"""`activation_checkpointing`: keep only each repeated block's input in the forward pass and recompute the rest
in the backward (torch.utils.checkpoint, non-reentrant). Memory for time: fewer stored activations, about one
more forward per step. It frees memory for a larger batch or context; it does not make a step faster.

The blocks are found automatically: the children of every ModuleList or Sequential whose children are two or
more modules of one class (a transformer's layers), or the modules of the classes the recipe names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from pydantic import Field
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..models.blocks import repeated_blocks
from .base import Phase, Speedup, SpeedupConfig, registered

if TYPE_CHECKING:
    from ..strategy.slots import Slots

log = logging.getLogger("accel")


_RECOMPUTE = ContextVar("accel_recompute", default=True)


@contextmanager
def without_recompute() -> Iterator[None]:
    """Checkpointed blocks run plainly inside: counting a step's model FLOPs must not count the recomputed
    forward, which is extra hardware work, not model work (MFU, not hardware FLOPs utilisation)."""
    token = _RECOMPUTE.set(False)
    try:
        yield
    finally:
        _RECOMPUTE.reset(token)


def checkpointed(forward: Callable) -> Callable:
    def run(*args: Any, **kwargs: Any) -> Any:
        if not _RECOMPUTE.get():
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return run


@registered("activation_checkpointing")
class ActivationCheckpointing(Speedup):
    """Recompute repeated blocks' activations in the backward instead of storing them: less memory, more time."""

    class Config(SpeedupConfig):
        blocks: list[str] = Field(
            default_factory=list,
            description="class names of the modules to checkpoint; "
            "empty: the members of every ModuleList/Sequential of same-class modules",
        )
        every: int = Field(
            1,
            ge=1,
            description="checkpoint every N-th block (1: all); the others keep their "
            "activations, trading less memory for less recomputation",
        )

    phase = Phase.MODEL  # before compile, which then traces the checkpointed forwards

    def __init__(self, cfg: Config | None = None):
        super().__init__(cfg)
        self.wrapped: list[nn.Module] = []

    def setup(self, engine: "Slots") -> None:
        blocks = repeated_blocks(engine.module, self.cfg.blocks)[:: self.cfg.every]
        if not blocks:
            named = (
                f"of the classes {self.cfg.blocks}"
                if self.cfg.blocks
                else "repeated (a ModuleList or Sequential of same-class modules)"
            )
            log.warning(
                "activation_checkpointing: the model has no blocks %s, so nothing is checkpointed; name "
                "them in `speedups.activation_checkpointing.blocks`",
                named,
            )
        for block in blocks:  # the instance's forward: the state_dict and the model's structure stay as they are
            block.forward = checkpointed(block.forward)
        self.wrapped = blocks

    def counting_context(self) -> AbstractContextManager:
        return without_recompute()

    def metrics(self) -> dict[str, Any]:
        return {"blocks": len(self.wrapped)}

    def teardown(self) -> None:
        for block in self.wrapped:
            del block.forward  # the class's forward again
        self.wrapped = []
