"""Multi-process training on torch.distributed, started by torchrun (or any launcher that sets its variables).

accel launches nothing of its own: `accel train --nproc N` runs torchrun (and passes it SIGINT/SIGTERM/SIGUSR1), and
SLURM / Kubernetes / Ray launchers work unchanged because only the standard RANK / WORLD_SIZE / LOCAL_RANK
variables are read.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    """This process's place among the training processes (a single process is rank 0 of 1)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.distributed:
            dist.all_reduce(tensor)
        return tensor

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def max(self, value: int, device: torch.device) -> int:
        if not self.distributed:
            return value
        tensor = torch.tensor([value], device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def any(self, flag: bool, device: torch.device) -> bool:
        """True on every rank when it is True on one: ranks must agree before stopping, or DDP hangs."""
        if not self.distributed:
            return flag
        return bool(self.all_reduce_sum(torch.tensor([float(flag)], device=device)).item())


def world_from_env() -> World:
    return World(
        int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))
    )


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


def restart_count() -> int:
    """How many times torchrun (`--max-restarts`) has restarted this process's group: 0 on the first start."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))


def init_process_group(world: World, device: torch.device) -> torch.device:
    """Join the process group (nccl for CUDA, gloo otherwise); return this rank's device."""
    if not world.distributed:
        return device
    if device.type == "cuda":
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        # FSDP (and the DTensor it brings) first: imported after the group exists, as torch.optim's first
        # add_param_group does through dynamo, it keeps a reference to the group, whose gloo threads then outlive
        # destroy_process_group (and abort the interpreter now and then); one-process runs never import it
        importlib.import_module("torch.distributed.fsdp")

        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo", device_id=device if device.type == "cuda" else None
        )
        atexit.register(_leave_at_exit)
    return device


def _leave_at_exit() -> None:
    """Leave a group still joined at interpreter exit (a hand-written loop's: nothing else leaves it), while the
    interpreter is whole: gloo's threads may still hold work whose tensors, freed during finalization, abort the
    process now and then (SIGABRT, "terminate called without an active exception"; under fsdp 2 of 14 runs of a
    two-step loop, none with this). Not after an unhandled exception: the other ranks may be waiting in a
    collective, and leaving could hang this one instead of letting torchrun stop them all."""
    if not hasattr(sys, "last_value"):  # set by the interpreter when an exception went unhandled
        destroy_process_group(wait_for_others=False)


def destroy_process_group(wait_for_others: bool) -> None:
    """Leave the group; after a run that ended well, together (after a failure nobody waits: the other ranks
    may never reach the barrier).

    The group's C++ object must die here, not at interpreter exit: gloo's threads (`gloo_tcp_loop`,
    `pt_gloo_runloop`) that are still running when the process exits end it with "terminate called without an
    active exception" (SIGABRT), now and then. Destroying the group frees it only once nothing else refers to
    it, so the caller drops the trainer (DDP and FSDP modules hold the group) and garbage in cycles is collected
    first, and the device meshes FSDP sharded over let go of it.
    """
    if dist.is_initialized():
        if wait_for_others:
            dist.barrier()
        gc.collect()
        dist.destroy_process_group()
        _release_mesh_groups()


def _release_mesh_groups() -> None:
    """Drop the process groups every DeviceMesh still holds (its `_pg_registry`, read only by torch.compile).

    Under fsdp, DTensor's sharding caches outlive the run and keep its meshes (seen holding them: an lru_cache
    keyed by DTensorSpecs and `_redistribute._planner_cache`; there are more, one of them per thread and one in
    C++), so the group's gloo threads outlived destroy_process_group. Clearing those caches would be a list of
    torch internals that changes with each release; emptying the meshes' registries frees the group whatever
    still holds a mesh, and a destroyed group is of no use to a mesh anyway.
    """
    device_mesh = sys.modules.get("torch.distributed.device_mesh")
    if device_mesh is None:  # not imported: no mesh exists
        return
    for obj in gc.get_objects():  # torch keeps no registry of meshes
        # not isinstance: DeviceMesh's metaclass inspects every object in Python (twice as slow, and touching
        # the deprecated torch.distributed.reduce_op on the way prints FutureWarnings)
        if issubclass(type(obj), device_mesh.DeviceMesh):
            obj._pg_registry.clear()
