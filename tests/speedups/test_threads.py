"""threads: torch's thread pools sized while training, restored after; inter-op only where torch allows it."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accel.callbacks import Callback
from accel.speedups import threads
from accel.speedups.threads import Threads, resolve_intra_op

ROOT = Path(__file__).resolve().parents[2]


class ThreadsDuringTraining(Callback):
    def __init__(self):
        self.counts: set[int] = set()

    def on_batch_end(self, trainer, info) -> None:
        self.counts.add(torch.get_num_threads())


def threads_seen(trainer) -> set[int]:
    seen = ThreadsDuringTraining()
    trainer.callbacks.append(seen)
    trainer.fit()
    return seen.counts


@pytest.mark.parametrize("start, requested", [(2, 1), (1, 2)])
def test_intra_op_threads_apply_while_training_and_are_restored(make_trainer, start, requested):
    torch.set_num_threads(start)  # the autouse fixture restores the original count
    trainer = make_trainer({"threads": {"intra_op": requested}})
    assert threads_seen(trainer) == {requested}
    assert torch.get_num_threads() == start
    assert trainer.speedups[0].metrics()["intra_op"] == start  # read after teardown: the restored count


def test_auto_caps_the_pool_at_the_cores_this_process_may_use(make_trainer, monkeypatch):
    torch.set_num_threads(2)
    monkeypatch.setattr(threads, "available_cpus", lambda: 1)  # as under `taskset -c 0`
    assert threads_seen(make_trainer({"threads": {}})) == {1}
    assert torch.get_num_threads() == 2


def test_resolve_intra_op():
    assert resolve_intra_op("auto", current=64, cpus=2) == 2  # a 2-CPU container on a 64-core host
    assert resolve_intra_op("auto", current=2, cpus=8) == 2  # never more than torch would use anyway
    assert resolve_intra_op(3, current=2, cpus=8) == 3  # an explicit count is taken as given


def test_inter_op_too_late_in_a_process_is_a_warning_not_a_crash(make_trainer, caplog):
    current = torch.get_num_interop_threads()
    try:
        torch.set_num_interop_threads(current)  # spends torch's one allowed call on a no-op, if still unspent
    except RuntimeError:
        pass
    with caplog.at_level(logging.WARNING, logger="accel"):
        summary = make_trainer({"threads": {"inter_op": current + 1}}).fit()
    assert summary["status"] == "completed" and torch.get_num_interop_threads() == current
    assert f"inter_op={current + 1} not applied" in caplog.text


SETUP_IN_A_FRESH_PROCESS = """
import torch
from accel.speedups.threads import Threads
speedup = Threads(Threads.Config(inter_op=1, intra_op=1))
speedup.setup(None)
print(torch.get_num_interop_threads(), torch.get_num_threads())
"""


@pytest.mark.slow
def test_inter_op_applies_in_a_fresh_process():
    out = subprocess.run(
        [sys.executable, "-c", SETUP_IN_A_FRESH_PROCESS],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    ).stdout.split()
    assert out == ["1", "1"]


def test_config_rejects_zero_threads():
    with pytest.raises(ValueError):
        Threads.Config(intra_op=0)
    with pytest.raises(ValueError):
        Threads.Config(inter_op=0)
