"""Shared fixtures: tiny recipes that train in well under a second on a CPU."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from accel.rundir import RunDir

ROOT = Path(__file__).resolve().parent.parent
# the tests that send SIGHUP model a terminal closing under a run: their processes must start as a terminal's do,
# with SIGHUP at its default, even when the suite itself runs under nohup (which ignores it, and children inherit
# that: accel keeps an ignored SIGHUP ignored, as nohup asks)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
# bf16 autocast runs on every CPU in the tests, including those that only emulate it (the tests check numbers,
# not speed); subprocesses inherit this. tests/speedups/test_amp.py checks the refusal without it.
os.environ["ACCEL_CPU_BF16"] = "1"
# the measured CPU peaks (MFU) go to a file of the test session's, not the user's cache
os.environ.setdefault("ACCEL_PEAKS_CACHE", os.path.join(tempfile.mkdtemp(prefix="accel-peaks-"), "peaks.json"))

TINY = {
    "name": "tiny",
    "seed": 0,
    "model": {"name": "small_cnn", "args": {"width": 4}},
    "data": {
        "dataset": {"name": "synthetic", "shape": [1, 8, 8], "num_samples": 64, "num_classes": 4},
        "batch_size": 16,
    },
    "optim": {"name": "sgd", "lr": 0.05},
    "train": {"epochs": 2},
    "device": "cpu",
    "log": {"progress": False, "tensorboard": False, "every_steps": 2},
}


@pytest.fixture(autouse=True)
def _import_path_restored():
    """A recipe naming user code adds its folder to sys.path and PYTHONPATH (accel.registry.add_import_roots):
    each test starts from the suite's, so one test's modules are never another's."""
    path, env = list(sys.path), os.environ.get("PYTHONPATH")
    yield
    sys.path[:] = path
    if env is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = env


@pytest.fixture
def tiny() -> dict:
    """A fresh copy of a tiny recipe as plain data; tests change what they need."""
    return copy.deepcopy(TINY)


@pytest.fixture
def write_recipe(tmp_path):
    def write(data: dict | str, name: str = "recipe.yaml") -> Path:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
        return path

    return write


def jpeg_folder(root: Path) -> Path:
    """Two classes of ten real JPEG files each, of varied sizes, under `root`."""
    from PIL import Image  # here, not at the top: the XLA environment (scripts/test-xla) has no Pillow

    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for i in range(10):
            pixels = rng.integers(0, 256, (12 + i, 10 + 2 * i, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i}.jpg", quality=90)
    return root


# (rtol, atol) of a captured CUDA-graph step against the eager one in bf16. cuBLAS and cuDNN may choose other bf16
# kernels under capture than eagerly; AdamW turns a near-zero gradient's changed sign into a whole step of lr.
# Seen on an H200 (2026-11-26) after 8 steps at lr 1e-2: the loss moved 1.2e-3 (one bf16 step), a weight 4.8e-3.
# fp32 is held to (1e-3, 1e-4): the same capture, without bf16's rounding.
GRAPH_BF16_TOLERANCE = (1e-2, 1e-2)


def cuda_only(test):
    """Mark `test` as needing CUDA; where there is none it is skipped, with that reason."""
    test = pytest.mark.cuda(test)
    return pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs CUDA: torch.cuda.is_available() is False on this machine"
    )(test)


def wait_for_first_checkpoint(run_dir: Path, process: subprocess.Popen, timeout: float = 240) -> None:
    """Block until RUN_DIR/checkpoints/last.pt (or a sharded checkpoint, strategy fsdp) exists; fail if the run
    ends or the time runs out first."""
    deadline = time.time() + timeout
    while not RunDir(run_dir, create=False).has_checkpoint():
        assert process.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.05)


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`accel ARGS` in a fresh process, as a user runs it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "accel.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )
