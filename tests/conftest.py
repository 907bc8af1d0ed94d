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
import psutil
import pytest
import torch
import yaml

from accel.runs.rundir import RunDir

ROOT = Path(__file__).resolve().parent.parent
# the tests that send SIGHUP model a terminal closing under a run: their processes must start as a terminal's do,
# with SIGHUP at its default, even when the suite itself runs under nohup (which ignores it, and children inherit
# that: accel keeps an ignored SIGHUP ignored, as nohup asks)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
# bf16 autocast runs on every CPU in the tests, including those that only emulate it (the tests check numbers,
# not speed); subprocesses inherit this. tests/speedups/test_amp.py checks the refusal without it.
os.environ["ACCEL_CPU_BF16"] = "1"
# the measured CPU peaks (MFU) go to a file of the test session's, removed when it ends, not the user's cache
if "ACCEL_PEAKS_CACHE" not in os.environ:
    PEAKS = tempfile.TemporaryDirectory(prefix="accel-peaks-")
    os.environ["ACCEL_PEAKS_CACHE"] = os.path.join(PEAKS.name, "peaks.json")

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


def syncs_by_caller(monkeypatch) -> list[str]:
    """Each device synchronisation from now on, by the name of the function that asked for it."""
    import inspect

    from accel import devices

    callers, synchronize = [], devices.synchronize
    monkeypatch.setattr(devices, "synchronize", lambda d: callers.append(inspect.stack()[1].function) or synchronize(d))
    return callers


def assert_captured_step_trains_alike(eager: tuple, graphed: tuple, start: list[torch.Tensor], bf16: bool) -> None:
    """A captured CUDA-graph step's (losses, weights) against the eager step's, from the same `start` weights.

    fp32 is held element by element to (1e-3, 1e-4): the same arithmetic, rounding only. In bf16 cuBLAS and cuDNN
    may choose other kernels under capture than eagerly, and AdamW turns a near-zero gradient's changed sign into a
    whole step of lr, so one weight may part by several lr (0.023 after 8 steps at lr 1e-2 on an H100, 2026-11-26,
    4.8e-3 on an H200): there both runs must have moved the weights the same way, the distance between them a
    tenth of the way each travelled at most. A replay with a stale lr or batch travels elsewhere."""
    (eager_losses, eager_weights), (graphed_losses, graphed_weights) = eager, graphed
    assert graphed_losses == pytest.approx(eager_losses, rel=1e-2 if bf16 else 1e-3)
    if not bf16:
        for a, b in zip(eager_weights, graphed_weights, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-4)
        return

    def flat(tensors):
        return torch.cat([t.detach().float().cpu().flatten() for t in tensors])

    travelled = (flat(eager_weights) - flat(start)).norm()
    apart = (flat(graphed_weights) - flat(eager_weights)).norm()
    assert travelled > 0 and apart <= 0.1 * travelled, f"captured and eager weights {apart:.3g} apart, {travelled=:.3g}"


def cuda_only(test):
    """Mark `test` as needing CUDA; where there is none it is skipped, with that reason."""
    test = pytest.mark.cuda(test)
    return pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs CUDA: torch.cuda.is_available() is False on this machine"
    )(test)


# A process the tests wait for is bounded by its progress, not by a clock: on a busy machine a run is slow, not
# stuck (a resume has taken 5 minutes to start at load 15, and a fixed 300 s wait failed it). It fails only when
# its process tree used no CPU time for STALL_S (hung: a deadlock, a wait that never ends), or after LIMIT_S.
STALL_S = 300.0
LIMIT_S = 3600.0


class Progress:
    """Whether `process` and its children still use CPU time; `check()` fails the test when they stopped."""

    def __init__(self, process: subprocess.Popen, stall_s: float = STALL_S, limit_s: float = LIMIT_S):
        self.process, self.stall_s = process, stall_s
        self.started = self.moved = self.looked = time.monotonic()
        self.limit_s, self.cpu = limit_s, -1.0

    def _cpu(self) -> float:
        try:
            root = psutil.Process(self.process.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return self.cpu
        total = 0.0
        for proc in tree:
            try:
                t = proc.cpu_times()
            except psutil.NoSuchProcess:  # ended while we looked: its time is in its parent's children_* now
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return total

    def check(self, waiting_for: str) -> None:
        now = time.monotonic()
        if now - self.looked < 1 and self.cpu >= 0:  # a look walks /proc: once a second is enough
            return
        self.looked, cpu = now, self._cpu()
        if cpu > self.cpu:
            self.cpu, self.moved = cpu, now
        if now - self.moved > self.stall_s or now - self.started > self.limit_s:
            kill_tree(self.process)
            idle = now - self.moved
            pytest.fail(
                f"{waiting_for}: {self.process.args} used no CPU time for {idle:.0f} s (or ran past "
                f"{self.limit_s:.0f} s); killed"
            )


def kill_tree(process: subprocess.Popen) -> None:
    try:
        root = psutil.Process(process.pid)
        tree = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for proc in tree:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def finish(process: subprocess.Popen, stall_s: float = STALL_S) -> tuple[str | None, str | None]:
    """`process.communicate()`, for as long as the process makes progress (`Progress`); its (stdout, stderr)."""
    progress = Progress(process, stall_s)
    while True:
        try:
            return process.communicate(timeout=2)
        except subprocess.TimeoutExpired:  # retrying communicate() loses no output
            progress.check("waiting for it to end")


def wait_until(condition, process: subprocess.Popen, what: str) -> None:
    """Block until `condition()` holds; fail if `process` ends first or stops making progress (`Progress`)."""
    progress = Progress(process)
    while not condition():
        assert process.poll() is None, f"the process ended before {what}"
        progress.check(f"waiting for {what}")
        time.sleep(0.05)


def wait_for_first_checkpoint(run_dir: Path, process: subprocess.Popen) -> None:
    """Block until RUN_DIR/checkpoints/last.pt (or a sharded checkpoint, strategy fsdp) exists; fail if the run
    ends or stops making progress first."""
    wait_until(lambda: RunDir(run_dir, create=False).has_checkpoint(), process, "its first checkpoint")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`accel ARGS` in a fresh process, as a user runs it, for as long as it makes progress (`finish`)."""
    argv = [sys.executable, "-m", "accel.cli", *map(str, args)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    out, err = finish(process)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


# The quick loop (`pytest -m "not slow"`, README) leaves out every test that starts a Python process (a trial, a
# run, the accel command): importing torch alone takes seconds there. A test that starts one, itself or through a
# fixture of any scope, fails here unless it is marked `slow`.
PYTHON_PROGRAMS = ("python", "accel", "torchrun")
_running: list[pytest.Item] = []  # the test being set up, run or torn down


def _starts_python(args) -> bool:
    program = args if isinstance(args, (str, bytes, os.PathLike)) else args[0]
    name = Path(os.fsdecode(program).split()[0]).name
    return name.startswith(PYTHON_PROGRAMS) or os.fsdecode(program) == sys.executable


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running.append(item)
    yield
    _running.clear()


_popen_init = subprocess.Popen.__init__


def _watched_popen_init(self, args, *rest, **kwargs):
    if _running and not _running[0].get_closest_marker("slow") and _starts_python(args):
        # pytest's Failed is a BaseException: no `except Exception` of accel's hides it
        pytest.fail(f"starts a Python process but is not marked `slow` (the quick loop leaves those out): {args}")
    _popen_init(self, args, *rest, **kwargs)


subprocess.Popen.__init__ = _watched_popen_init
