"""Sharded checkpoints for `strategy: fsdp` through torch.distributed.checkpoint (DCP).

Each rank writes its own shards of the model and optimizer state, and its own trainer state (epoch, step,
scheduler, RNG, speed-ups, callbacks) as `trainer-RANK.pt`, into a fresh folder; rank 0 then points the run
directory's `checkpoints/last` link at it (an atomic rename) and removes the previous folder. The shards are
written in a background thread (`dcp.async_save`) on a gloo group of their own, so training neither waits on
storage nor shares its group's collectives with the writer; the next save and the end of training wait for it.
DCP reshards on load: a checkpoint saved by N processes resumes at any world size, one process included.
"""

from __future__ import annotations

import os
import shutil
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..errors import CheckpointError
from .checkpoint import check_same_model, save_checkpoint, unreadable_message
from .rundir import RunDir

TRAINER_STATE = "trainer-{rank}.pt"  # in a sharded checkpoint's folder, beside DCP's .metadata and shards


def model_and_optimizer(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The state DCP saves and loads in place: this rank's shards (DTensors) keyed by parameter name."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, optim = get_state_dict(module, optimizer)
    return {"model": model, "optimizer": optim}


class ShardedSaver:
    """Collective: every rank saves at the same steps. `save` returns once this rank's state is copied to
    memory; the previous save is waited for (and made `last`) first."""

    def __init__(self, run_dir: RunDir, rank: int, background: bool = True):
        self.run_dir, self.rank, self.background = run_dir, rank, background
        self._group: Any = None
        self._pending: tuple[Future, Path] | None = None
        self._saves = 0  # the same on every rank: a fresh folder for each save, even two at one step

    def save(self, trainer, state: dict[str, Any]) -> None:
        """`state`: the trainer's state without the model and optimizer (`Trainer.training_state`)."""
        from torch.distributed.checkpoint import async_save, save

        self.wait()
        # a name of its own: rank 0 may still be renaming the previous save's folder while the others start this
        folder = self.run_dir.checkpoints / f".step-{trainer.step:08d}-{self._saves}.tmp"
        self._saves += 1
        folder.mkdir(parents=True, exist_ok=True)
        save_checkpoint(state, folder / TRAINER_STATE.format(rank=self.rank))
        shards = model_and_optimizer(trainer.module, trainer.optimizer)
        if self._group is None:  # collective: every rank reaches its first save together
            self._group = dist.new_group(backend="gloo")
        if self.background:
            self._pending = (async_save(shards, checkpoint_id=folder, process_group=self._group), folder)
            return
        done: Future = Future()
        done.set_result(save(shards, checkpoint_id=folder, process_group=self._group))
        self._pending = (done, folder)
        self.wait()

    def wait(self) -> None:
        """Block until the pending save is written, and (rank 0) make it the run's `last` checkpoint."""
        if self._pending is None:
            return
        future, folder = self._pending
        self._pending = None
        future.result()  # DCP's write is collective: when rank 0's finishes, every rank's shards are on disk
        if self.rank == 0:
            commit(self.run_dir, folder)

    def close(self) -> None:
        self.wait()
        if self._group is not None:  # its gloo threads must not outlive the run (accel.strategy.world)
            dist.destroy_process_group(self._group)
            self._group = None


def commit(run_dir: RunDir, written: Path) -> None:
    """Rename the written folder into place and swap the `last` link to it atomically; then remove the old."""
    step = written.name.removeprefix(".").removesuffix(".tmp").rsplit("-", 1)[0]
    final, n = run_dir.checkpoints / step, 1
    while final.exists():  # the same step saved twice (an epoch's end, then the run's)
        final, n = run_dir.checkpoints / f"{step}.{n}", n + 1
    written.rename(final)
    link = run_dir.sharded_checkpoint
    previous = link.resolve() if link.is_symlink() else None
    temp = link.with_name(".last.link.tmp")
    temp.unlink(missing_ok=True)
    temp.symlink_to(final.name)
    os.replace(temp, link)
    if previous is not None and previous != final.resolve():
        shutil.rmtree(previous, ignore_errors=True)


def load(folder: Path, trainer, rank: int) -> dict[str, Any]:
    """The trainer state for `rank` with this process's model and optimizer shards loaded in place from
    `folder`, whatever world size wrote it. `rank_state`: whether the folder held this rank's own RNG."""
    own = folder / TRAINER_STATE.format(rank=rank)
    state = _trainer_state(own if own.is_file() else folder / TRAINER_STATE.format(rank=0))  # a rank not saved
    check_same_model(state["model_signature"], trainer.module, folder)
    shards = model_and_optimizer(trainer.module, trainer.optimizer)
    _read(folder, shards)
    return {**state, **shards, "sharded": True, "rank_state": own.is_file()}


def whole(folder: Path, module: nn.Module) -> dict[str, Any]:
    """Rank 0's trainer state with the whole model's weights under `model`, read in one process (`accel
    export`): the shards of every rank, joined into `module`'s unsharded layout."""
    state = _trainer_state(folder / TRAINER_STATE.format(rank=0))
    check_same_model(state["model_signature"], module, folder)
    weights = {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}
    _read(folder, {"model": weights})
    return {**state, "model": weights}


def _trainer_state(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # missing, truncated, or objects weights_only refuses
        raise CheckpointError(unreadable_message(path, err)) from None


def _read(folder: Path, shards: dict[str, Any]) -> None:
    from torch.distributed.checkpoint import CheckpointException
    from torch.distributed.checkpoint import load as dcp_load

    try:
        with warnings.catch_warnings():  # one process reading every rank's shards is what is meant here
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp_load(shards, checkpoint_id=folder, planner=plain_data_planner())
    except (Exception, CheckpointException) as err:  # a BaseException, holding each rank's error
        cause = next(iter(err.failures.values()))[0] if isinstance(err, CheckpointException) else err
        reason = str(cause).split("WeightsUnpickler error:", 1)[-1].strip().splitlines()  # not torch's advice
        raise CheckpointError(
            f"Sharded checkpoint {folder} could not be read ({reason[0] if reason else type(cause).__name__}). "
            "It is written whole or not at all: was it copied in part, or edited?"
        ) from None


def set_state(module: nn.Module, optimizer: torch.optim.Optimizer, model: dict, optim: dict) -> None:
    """Apply what `load` read (the optimizer's hyper-parameters and step counts are not tensors it fills)."""
    from torch.distributed.checkpoint.state_dict import set_state_dict

    set_state_dict(module, optimizer, model_state_dict=model, optim_state_dict=optim)


def plain_data_planner() -> Any:
    """DCP's load planner, except that values other than tensors (the optimizer's hyper-parameters) load as with
    torch.load(weights_only=True): DCP's own unpickles them with weights_only=False, which can run code."""
    from torch.distributed.checkpoint import DefaultLoadPlanner

    class PlainDataPlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item, value) -> None:
            torch.load(value, weights_only=True)  # raises on anything but tensors and plain data
            value.seek(0)
            super().load_bytes(read_item, value)

    return PlainDataPlanner()
