"""Beyond one machine's first start (gloo on the CPU): two "machines" on loopback meeting at a c10d rendezvous,
a machine that never comes, and torchrun's restarts after a rank is killed."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
import yaml

from accel.launch.relay import _kill_tree
from accel.runs.records import FitSummary, read_summary
from conftest import LIMIT_S, ROOT, Progress, finish, wait_for_first_checkpoint
from tests.strategy.test_distributed import RECIPE as DDP_RECIPE

RECIPE = {**DDP_RECIPE, "name": "nodes"}
TOLERANCE = 1e-5
# several torch processes at once: on 2 busy cores a test can take minutes (pyproject's default is 600 s)
pytestmark = pytest.mark.timeout(LIMIT_S)  # bounded by the runs' progress (conftest.finish)
METRICS = ("train_loss", "val_loss", "val_accuracy")


_started: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test():
    """A failed test kills what it started: runs left training would slow every test after it."""
    yield
    while _started:
        _kill_tree(_started.pop().pid)


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump(RECIPE))
    return path


def _train(recipe, out, *args: str, log: str = "") -> subprocess.Popen:
    """`accel train`, its output in files named after `out` and `log` (pipes left unread could fill and block)."""
    log = f"{out}{log}"
    process = subprocess.Popen(
        [sys.executable, "-m", "accel.cli", "train", str(recipe), "--out", str(out), *args],
        cwd=ROOT,
        stdout=open(f"{log}.out", "w"),
        stderr=open(f"{log}.err", "w"),
        text=True,
    )
    process.log = log
    _started.append(process)
    return process


def _ended(process: subprocess.Popen) -> tuple[int, str, str]:
    """Wait for `process` while it makes progress (conftest.finish): its exit code, stdout and stderr."""
    finish(process)
    return process.returncode, open(f"{process.log}.out").read(), open(f"{process.log}.err").read()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _summary(out) -> FitSummary:
    return read_summary(out / "summary.json")


def _epoch_records(out) -> list[dict]:
    records = map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
    return [r for r in records if r["kind"] == "epoch"]


def _assert_same_metrics(a: dict, b: dict) -> None:
    for key in METRICS:
        assert a[key] == pytest.approx(b[key], rel=TOLERANCE, abs=TOLERANCE), key


@pytest.mark.slow
def test_two_machines_on_loopback_train_as_one_machine_with_as_many_processes(recipe, tmp_path):
    endpoint = f"127.0.0.1:{_free_port()}"
    out = tmp_path / "two-nodes"
    nodes = [
        _train(recipe, out, "--nproc", "1", "--nnodes", "2", "--node-rank", i, "--rdzv-endpoint", endpoint, log=i)
        for i in ("0", "1")
    ]
    one = _train(recipe, tmp_path / "one-node", "--nproc", "2")
    ended = [_ended(node) for node in nodes]
    for code, _, err in ended:
        assert code == 0, err
    assert sorted(stdout.strip() for _, stdout, _ in ended) == ["", str(out)]  # only global rank 0 speaks
    code, _, err = _ended(one)
    assert code == 0, err
    a, b = _summary(out), _summary(tmp_path / "one-node")
    assert a.steps == b.steps == 3 * (256 // 16)
    _assert_same_metrics(a.metrics, b.metrics)
    epochs_a, epochs_b = _epoch_records(out), _epoch_records(tmp_path / "one-node")
    assert len(epochs_a) == len(epochs_b) == 3
    for x, y in zip(epochs_a, epochs_b):
        _assert_same_metrics(x, y)


@pytest.mark.slow
def test_a_machine_that_never_comes_is_a_clear_timeout(recipe, tmp_path):
    out = tmp_path / "alone"
    started = time.monotonic()
    args = ("--nproc", "1", "--nnodes", "2", "--node-rank", "0", "--rdzv-timeout", "3")
    alone = _train(recipe, out, *args, "--rdzv-endpoint", f"127.0.0.1:{_free_port()}")
    code, _, err = _ended(alone)
    assert code == 2, err
    assert "only some of the 2 machines (--nnodes) joined the rendezvous at 127.0.0.1:" in err
    assert "within 3 s (--rdzv-timeout)" in err and "Traceback" not in err
    assert time.monotonic() - started < 500  # start-up on busy cores, the 3 s, torchrun's exit: not join_timeout's 600
    assert not (out / "recipe.yaml").exists()  # no rank ever started


def _worker(run: subprocess.Popen, rank: int) -> psutil.Process:
    """The training process of global rank `rank`: a child of `run`'s torchrun with RANK=rank."""
    progress = Progress(run)
    while True:
        for process in psutil.Process(run.pid).children(recursive=True):
            try:  # a short-lived child (a tool a rank runs) may end between the listing and the look
                if "accel.launch.torchrun" in process.parent().cmdline() and process.environ().get("RANK") == str(rank):
                    return process
            except (psutil.Error, AttributeError):  # gone, or its parent is
                continue
        progress.check(f"waiting for a rank {rank} process")
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_a_killed_rank_is_restarted_and_the_run_ends_as_an_uninterrupted_one(recipe, tmp_path, rank):
    longer = ("--set", "train.epochs=8", "--set", "checkpoint.every_steps=7")  # the kill lands early, mid-epoch
    whole = _train(recipe, tmp_path / "whole", "--nproc", "2", *longer)
    out = tmp_path / "restarted"
    run = _train(recipe, out, "--nproc", "2", "--max-restarts", "1", *longer)
    wait_for_first_checkpoint(out, run)
    _worker(run, rank).send_signal(signal.SIGKILL)  # as a crashed process or a lost device would end
    code, stdout, err = _ended(run)
    assert code == 0, err
    assert stdout.strip() == str(out)
    assert "restart 1: continuing" in err and "from its last checkpoint" in err
    code, _, whole_err = _ended(whole)
    assert code == 0, whole_err
    a, b = _summary(tmp_path / "whole"), _summary(out)
    assert a.status == b.status == "completed" and a.steps == b.steps == 8 * 16
    _assert_same_metrics(a.metrics, b.metrics)
    assert [r["step"] for r in _epoch_records(out)] == [r["step"] for r in _epoch_records(tmp_path / "whole")]
