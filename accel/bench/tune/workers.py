"""`accel tune --workers N`: N worker processes on this machine sharing the search's study, each given its share of
the machine: one GPU each on a GPU machine (round-robin when there are more workers than GPUs), else its own slice
of the cores, pinned and with as many threads (2 workers on 2 cores: 1 thread each). Each runs `accel tune --join`,
the same worker another machine adds (accel.bench.tune.study.join), and writes its log beside the search's output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ... import devices
from ...errors import AccelError
from ...runs.signals import die_with_parent
from .study import StudySpec

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass
class Share:
    """What one worker may use: its environment's additions and, on a CPU, the cores it is pinned to."""

    env: dict[str, str]
    cores: list[int] | None
    said: str


def shares(n: int) -> list[Share]:
    """The machine split between `n` workers."""
    gpus = devices.cuda_count()
    if gpus:
        return [Share({"CUDA_VISIBLE_DEVICES": str(i % gpus)}, None, f"GPU {i % gpus}") for i in range(n)]
    cores = devices.usable_cpu_ids()
    if n > len(cores):
        raise AccelError(f"--workers {n}: this machine has {len(cores)} cores; give at most {len(cores)}.")
    share = [cores[i * len(cores) // n : (i + 1) * len(cores) // n] for i in range(n)]
    said = [f"cores {','.join(map(str, own))}" for own in share]
    return [Share(dict.fromkeys(THREAD_VARIABLES, str(len(own))), own, s) for own, s in zip(share, said)]


def split_line(split: list[Share]) -> str:
    """One line saying how the machine was split: `2 workers on 2 cores: 1 thread each (cores 0 | cores 1)`."""
    if split[0].cores is None:
        return f"{len(split)} workers, one GPU each ({' | '.join(s.said for s in split)})"
    cores, threads = sum(len(s.cores) for s in split), sorted({len(s.cores) for s in split})
    each = "-".join(map(str, threads))
    return f"{len(split)} workers on {cores} cores: {each} thread(s) each ({' | '.join(s.said for s in split)})"


def start(spec: StudySpec, n: int, logs: Path) -> str:
    """Start `n` workers on the study (added to `spec.helpers`, which then leaves the rounds to them); what was
    started, in a line."""
    split = shares(n)
    logs.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "accel.cli", "tune", "--join", spec.storage, "--study", spec.name]
    for i, share in enumerate(split):
        with open(logs / f"worker-{i}.log", "ab") as log:
            spec.helpers.append(
                subprocess.Popen(
                    argv,
                    env={**os.environ, **share.env},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_pinned(share.cores),
                )
            )
    return f"{split_line(split)}; their logs: {logs}/worker-*.log"


def _pinned(cores: list[int] | None):
    def setup() -> None:
        die_with_parent()  # a worker the search started ends with it
        if cores is not None:
            os.sched_setaffinity(0, cores)

    return setup
