"""SIGUSR1, a cluster's notice of preemption: the run checkpoints, exits with PREEMPTED_EXIT, and resumes exactly.

In-process, as tests/test_signals.py: each test sends SIGUSR1 to its own process at a chosen optimizer step."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from accel.cli import main as cli_main
from accel.engine.core import Core
from accel.runs.records import FitSummary, StepRecord, read_metrics, read_summary
from accel.runs.signals import PREEMPTED_EXIT


def preempt_at(monkeypatch, step: int, times: int = 1) -> None:
    """SIGUSR1 to this process `times` times once the run has taken `step` optimizer steps."""
    count = Core.count_step

    def signalled(self):
        count(self)
        if self.steps == step:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs before os.kill returns

    monkeypatch.setattr(Core, "count_step", signalled)


def main(argv: list[str]) -> int:
    try:
        return cli_main(argv)
    except KeyboardInterrupt as escaped:
        pytest.fail(f"a signal escaped accel train as {type(escaped).__name__}")


def summary(out) -> FitSummary:
    return read_summary(out / "summary.json")


def weights(out) -> dict[str, torch.Tensor]:
    return torch.load(out / "checkpoints" / "last.pt", weights_only=True)["model"]


def losses(out) -> list[float]:
    return [r.loss for r in read_metrics(out / "metrics.jsonl") if isinstance(r, StepRecord)]


@pytest.mark.parametrize("times", [1, 3])  # a repeated notice is one request: it never forces a stop
def test_sigusr1_checkpoints_exits_with_the_preemption_code_and_the_resumed_run_is_exact(
    tiny, write_recipe, tmp_path, capsys, monkeypatch, times
):
    recipe = write_recipe(tiny)
    whole, out = tmp_path / "whole", tmp_path / "preempted"
    assert main(["train", str(recipe), "--out", str(whole)]) == 0
    with monkeypatch.context() as patch:
        preempt_at(patch, step=2, times=times)  # mid-epoch: an epoch has 3 steps
        assert main(["train", str(recipe), "--out", str(out)]) == PREEMPTED_EXIT
    err = capsys.readouterr().err
    assert f"preempted; continue with: accel train {out}/recipe.yaml --out {out} --resume" in err
    assert summary(out).status == "preempted" and summary(out).steps == 2
    assert torch.load(out / "checkpoints" / "last.pt", weights_only=True)["step"] == 2
    assert main(["train", str(out / "recipe.yaml"), "--out", str(out), "--resume"]) == 0
    assert summary(out).status == "completed"
    assert summary(out).metrics == summary(whole).metrics
    assert len(losses(whole)) == 3 and losses(out) == losses(whole)
    for name, tensor in weights(whole).items():
        assert torch.equal(weights(out)[name], tensor), name


def test_sigusr1_in_start_up_exits_with_the_preemption_code_and_writes_nothing(
    tiny, write_recipe, tmp_path, monkeypatch
):
    import accel.train.run

    build = accel.train.run.build_trainer
    monkeypatch.setattr(
        accel.train.run, "build_trainer", lambda *a, **k: (os.kill(os.getpid(), signal.SIGUSR1), build(*a, **k))[1]
    )
    out = tmp_path / "run"
    assert main(["train", str(write_recipe(tiny)), "--out", str(out)]) == PREEMPTED_EXIT
    assert not (out / "checkpoints" / "last.pt").exists()  # the job script starts it afresh, without --resume
