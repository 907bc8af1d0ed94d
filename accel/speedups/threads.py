"""`threads`: torch's intra-op and inter-op thread counts for the training process."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any, Literal

import torch
from pydantic import Field

from ..devices import available_cpus
from .base import Phase, Speedup, SpeedupConfig, registered

if TYPE_CHECKING:
    from ..strategy.slots import Slots

log = logging.getLogger("accel")


def resolve_intra_op(requested: int | Literal["auto"], current: int, cpus: int) -> int:
    """The intra-op thread count: the requested number, or for `auto` the current one capped at `cpus`.

    torch sizes its pool from the machine's cores, not from the cores this process may use, so under
    taskset or a container's CPU set it can start more threads than cores, and they then fight.
    """
    return requested if requested != "auto" else max(1, min(current, cpus))


def set_interop_threads(count: int) -> bool:
    """Set torch's inter-op pool size; False when torch no longer allows it in this process."""
    if torch.get_num_interop_threads() == count:
        return True
    try:
        torch.set_num_interop_threads(count)
    except RuntimeError:  # torch takes this once, and only before any parallel work has started
        return False
    return True


@registered("threads")
class Threads(Speedup):
    """Thread counts for torch's CPU pools, capped at the cores this process may use (no oversubscription).

    DataLoader workers need no setting here: accel.data.loaders.worker_init always limits each worker's
    torch, BLAS and OpenMP pools to one thread, since N workers with a pool of all cores each is the
    oversubscription that makes loading several times slower.
    """

    class Config(SpeedupConfig):
        intra_op: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
            "auto",
            description="Threads one op (a matmul, a convolution) may use. auto: torch's default capped at "
            "the CPU cores this process may run on (taskset/affinity), which torch's default does not look at.",
        )
        inter_op: int | None = Field(
            None,
            ge=1,
            description="Threads that run independent ops at once (TorchScript forks, some CPU graphs). "
            "Unset: torch's default. torch accepts it once per process and only before any parallel work; "
            "when it is too late a warning says so and the count is left as it is. Teardown cannot undo it.",
        )

    phase = Phase.FLAGS
    thread_count = "intra_op"

    def __init__(self, cfg: Config | None = None):
        super().__init__(cfg)
        self._previous_intra_op: int | None = None

    def setup(self, engine: "Slots") -> None:
        if self._previous_intra_op is None:  # a second fit() keeps the original value to restore
            self._previous_intra_op = torch.get_num_threads()
        torch.set_num_threads(resolve_intra_op(self.cfg.intra_op, self._previous_intra_op, available_cpus()))
        inter_op = self.cfg.inter_op
        if inter_op is not None and not set_interop_threads(inter_op):
            log.warning(
                "threads: inter_op=%d not applied: torch sets it once per process, before any parallel "
                "work, and this process is past that (it stays %d). Run in a fresh process, as "
                "`accel train` and the bench do.",
                inter_op,
                torch.get_num_interop_threads(),
            )

    def metrics(self) -> dict[str, Any]:
        return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}

    def teardown(self) -> None:
        if self._previous_intra_op is not None:
            torch.set_num_threads(self._previous_intra_op)
            self._previous_intra_op = None
