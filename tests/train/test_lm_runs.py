"""The language-model path end to end in fresh processes: two processes (DDP) equal one with the same global
batch, and a run killed with SIGKILL resumes to exactly the uninterrupted result."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

import pytest
import yaml

from accel.runs.records import FitSummary, read_summary
from conftest import LIMIT_S, finish, run_cli, wait_for_first_checkpoint
from tests.strategy.test_distributed import TOLERANCE, _train

# several processes that import torch: bounded by their progress (conftest.finish), not by the suite's 600 s clock
pytestmark = pytest.mark.timeout(LIMIT_S)
METRICS = ("train_loss", "val_loss", "val_perplexity", "val_accuracy")


@pytest.fixture
def lm_recipe(tmp_path) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "textwrap.py").write_text(Path(textwrap.__file__).read_text())  # ~20 kB of real text
    recipe = {
        "name": "lm",
        "seed": 0,
        "task": "language_model",
        "device": "cpu",
        "model": {"name": "gpt", "args": {"width": 16, "depth": 1, "heads": 2}},
        "data": {"dataset": {"name": "text_files", "root": str(corpus), "context": 16}, "batch_size": 8},
        "optim": {"name": "adamw", "lr": 3e-3},
        "schedule": {"name": "onecycle"},
        "train": {"epochs": 2},
        "log": {"progress": False, "tensorboard": False, "every_steps": 5},
    }
    path = tmp_path / "lm.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _summary(out: Path) -> FitSummary:
    return read_summary(out / "summary.json")


@pytest.mark.slow
def test_two_processes_train_the_language_model_as_one_does(lm_recipe, tmp_path):
    # 40 steps: Adam amplifies the all-reduce's float32 rounding step by step; by 250 steps it is 1.2e-5
    short = ("--set", "train.max_steps=40")
    two = _train(lm_recipe, tmp_path / "two", "--nproc", "2", *short)
    one = run_cli("train", lm_recipe, "--out", tmp_path / "one", "--set", "data.batch_size=16", *short)
    _, err = finish(two)
    assert two.returncode == 0, err
    assert one.returncode == 0, one.stderr
    a, b = _summary(tmp_path / "two"), _summary(tmp_path / "one")
    assert a.steps == b.steps == 40
    for key in METRICS:
        assert a.metrics[key] == pytest.approx(b.metrics[key], rel=TOLERANCE, abs=TOLERANCE), key


@pytest.mark.slow
def test_a_killed_language_model_run_resumes_exactly(lm_recipe, tmp_path):
    # killed at its first checkpoint (epoch 1, polled every 50 ms): three epochs of room, where 20 took the
    # three runs past 10 minutes at load 9
    longer = ("--set", "train.epochs=4")
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    reference = _train(lm_recipe, whole, *longer)
    victim = _train(lm_recipe, killed, *longer)
    wait_for_first_checkpoint(killed, victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert not (killed / "summary.json").exists(), "killed too late: the run had finished"
    resumed = _train(lm_recipe, killed, "--resume", *longer)
    _, err = finish(resumed)  # a resume has taken 5 minutes to start at load 15: no clock, progress
    assert resumed.returncode == 0, err
    _, err = finish(reference)
    assert reference.returncode == 0, err
    a, b = _summary(whole), _summary(killed)
    assert a.steps == b.steps and a.metrics == b.metrics
