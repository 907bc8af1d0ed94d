"""A run directory's records stay true through what users do to them: divergence after the last log line, a
SIGKILL and a resume, a recipe edited between runs, thousands of epochs, a full disk."""
from __future__ import annotations

import json

import pytest
import torch

from accel.cli import main


def strict(text: str):
    def no_constants(name):
        raise AssertionError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=no_constants)


@pytest.mark.parametrize("steps", [2, 3])
def test_divergence_after_the_last_log_line_is_reported_as_such(tiny, write_recipe, tmp_path, capsys, steps):
    tiny["optim"] = {"name": "sgd", "lr": 1e6}
    tiny["log"]["every_steps"] = 10  # the run ends before any step record reads the loss
    out = tmp_path / "run"
    code = main(["train", str(write_recipe(tiny)), "--out", str(out), "--set", f"train.max_steps={steps}"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert f"training diverged: the loss became NaN or infinite by step {steps}" in err
    summary = strict((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["diverged_at_step"] == steps
    for path in (out / "checkpoints").glob("*.pt"):
        state = torch.load(path, weights_only=True)
        assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())


def test_a_non_finite_setting_is_refused_by_name(tiny, write_recipe, capsys):
    tiny["optim"]["lr"] = float("inf")
    assert main(["train", str(write_recipe(tiny)), "--set", "train.clip_grad_norm=.nan"]) == 2
    err = capsys.readouterr().err
    assert "`optim.lr` = inf: Input should be a finite number" in err
    assert "`train.clip_grad_norm` = nan: Input should be a finite number" in err
