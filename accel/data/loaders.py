"""DataLoader construction: worker count, pinning and per-worker setup chosen once, here, with reasons."""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import sys
from collections.abc import Callable
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field
from torch.utils.data import DataLoader, Dataset, Sampler, default_collate

from ..devices import available_cpus
from ..schema import StrictModel
from .datasets.memory import GatheredBatch, GatheredDict
from .thread_loader import ThreadLoader

MAX_AUTO_WORKERS = 4


class LoaderConfig(StrictModel):
    """How batches are produced; `auto` values are resolved from the dataset and device when the loader is built."""

    num_workers: Annotated[int, Field(ge=0)] | Literal["auto"] = Field(
        "auto",
        description="Workers (processes or threads: `workers_kind`). `auto`: 0 for in-memory datasets "
        "(indexing a tensor is cheaper than shipping it between processes), else one per CPU core less one kept "
        f"for the training loop, at least 1 and at most {MAX_AUTO_WORKERS}.",
    )
    pin_memory: bool | Literal["auto"] = Field(
        "auto",
        description="Page-locked batches for faster, asynchronous host-to-GPU copies. `auto`: on only for CUDA "
        "devices (elsewhere pinning buys nothing and torch warns).",
    )
    workers_kind: Literal["processes", "threads", "auto"] = Field(
        "processes",
        description="What the `num_workers` workers are. `processes`: DataLoader worker processes. `threads`: a "
        "pool of threads in the training process (accel/data/thread_loader.py), for decoders that release the GIL "
        "(torchvision's decode_jpeg, PIL, OpenCV): no pickling, shared memory, the same batches. `auto`: "
        "threads for datasets that decode files with such a decoder (image folders), else processes.",
    )
    prefetch_factor: int = Field(2, ge=1, description="Batches each worker prepares ahead; used only with workers.")
    persistent_workers: bool = Field(
        True, description="Keep workers alive between epochs instead of re-forking them; used only with workers."
    )
    backend: Literal["torch", "dali"] = Field(
        "torch",
        description="`torch`: a DataLoader over the dataset. `dali`: NVIDIA DALI reads, decodes (on the "
        "GPU with CUDA), resizes and normalises image files itself; image folders only, needs the `dali` extra.",
    )


def resolve_num_workers(cfg: LoaderConfig, dataset: Dataset) -> int:
    """Worker count for `dataset`: the configured number, or the `auto` choice described on the field."""
    if cfg.num_workers != "auto":
        return cfg.num_workers
    if getattr(dataset, "in_memory", False):
        return 0
    # One core stays with the main process, which runs the step (and, on CPU, the model itself).
    return max(1, min(MAX_AUTO_WORKERS, available_cpus() - 1))


def resolve_workers_kind(cfg: LoaderConfig, dataset: Dataset) -> str:
    """`processes` or `threads`: the configured kind, or the `auto` choice described on the field."""
    if cfg.workers_kind != "auto":
        return cfg.workers_kind
    return "threads" if getattr(dataset, "decodes_without_gil", False) else "processes"


def resolve_pin_memory(cfg: LoaderConfig, device: torch.device) -> bool:
    """The configured value, or for `auto`: True exactly when batches go to a CUDA device."""
    return device.type == "cuda" if cfg.pin_memory == "auto" else cfg.pin_memory


def worker_init(worker_id: int) -> None:
    """Seed Python and NumPy RNGs from the worker's torch seed, limit every thread pool to one thread, and have a
    crash in native code print where it happened (torch's own handler only says that the worker died).

    N workers each starting a BLAS/OpenMP/OpenCV pool sized to all cores oversubscribe the CPU and slow
    decoding down instead of up; one thread per worker process is the parallelism that is wanted.
    """
    faulthandler.enable()  # a worker that crashes in native code (a decoder, OpenCV) prints its Python stack
    # preemption and a closed terminal are the training process's business (accel/runs/signals.py); a cluster may send
    # SIGUSR1, and a shell whose terminal closes SIGHUP, to every process of a job, and their default action would
    # end the worker and with it the loop before it can save
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    seed = torch.initial_seed() % 2**32  # torch gives each worker base_seed + worker_id
    random.seed(seed)
    np.random.seed(seed)
    torch.set_num_threads(1)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"  # for libraries first loaded later in this worker
    # the BLAS and OpenMP pools already loaded start at one thread from WorkerLoader, which limits them in the
    # parent as the workers fork: threadpoolctl called here, in a forked child, can hang in a BLAS whose threads
    # the parent had running (joblib/threadpoolctl#176; a worker hung so until the test's 600 s timeout)
    # OpenCV only where the process loaded it already: importing a native library in a worker forked from a process
    # with live threads is where a fork deadlocks or crashes (a lock held by a thread the child lacks), and every
    # worker of every loader paid for it, whether its dataset used OpenCV or not
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        cv2.setNumThreads(0)  # 0 = OpenCV runs its own functions single-threaded


class WorkerLoader(DataLoader):
    """A DataLoader with worker processes that start with one thread in each BLAS and OpenMP pool: the limit is set
    in this process while `iter` forks them (they inherit it) and put back at once (see worker_init)."""

    def __iter__(self):
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # installed with the data extra (scikit-learn's); torch's own pools are limited anyway
            return super().__iter__()
        with threadpool_limits(1):
            return super().__iter__()


def collate(samples: list | GatheredBatch | GatheredDict) -> Any:
    """torch's default_collate, except for a batch an in-memory dataset already gathered in one piece."""
    if isinstance(samples, GatheredBatch):
        return [samples.inputs, samples.targets]  # what default_collate makes of (input, target) samples
    if isinstance(samples, GatheredDict):
        return dict(samples)
    return default_collate(samples)


def build_loader(
    dataset: Dataset,
    cfg: LoaderConfig,
    *,
    batch_size: int,
    sampler: Sampler[int] | None,
    drop_last: bool,
    seed: int,
    device: torch.device,
    collate_fn: Callable | None = None,
) -> DataLoader:
    """A DataLoader over `dataset` with `cfg` resolved; worker seeds derive from `seed`, so runs repeat.

    `collate_fn` (default: `collate`) turns samples into a batch; `augment.on: loader` passes one.
    """
    workers = resolve_num_workers(cfg, dataset)
    common = dict(
        batch_size=batch_size,
        sampler=sampler,
        drop_last=drop_last,
        pin_memory=resolve_pin_memory(cfg, device),
        generator=torch.Generator().manual_seed(seed),
        collate_fn=collate_fn or collate,
    )
    if workers > 0 and resolve_workers_kind(cfg, dataset) == "threads":
        return ThreadLoader(dataset, threads=workers, prefetch_factor=cfg.prefetch_factor, **common)
    if workers == 0:  # DataLoader rejects the worker options without workers
        return DataLoader(dataset, **common)
    workers_options = dict(
        prefetch_factor=cfg.prefetch_factor, persistent_workers=cfg.persistent_workers, worker_init_fn=worker_init
    )
    return WorkerLoader(dataset, num_workers=workers, **common, **workers_options)
