"""How often a run saves: checkpoint.every_steps and every_minutes, mid-epoch, and an exact resume from there."""

from __future__ import annotations

import pytest
import torch

from accel.callbacks import Callback
from accel.callbacks import checkpointing as checkpointing_module
from accel.cli import main
from accel.runs.checkpoint import load_checkpoint
from accel.runs.records import FitSummary, read_metrics, read_summary
from accel.train import run as run_module


class _CrashAt(Callback):
    """A crash (not a signal: nothing is saved on the way out) after optimizer step `step`."""

    def __init__(self, step: int):
        self.step = step

    def on_batch_end(self, trainer, info):
        if trainer.step == self.step:
            raise RuntimeError("crashed on purpose")


def _summary(out) -> FitSummary:
    return read_summary(out / "summary.json")


@pytest.fixture
def recipe(tiny, write_recipe):
    tiny["data"]["dataset"]["num_samples"] = 160  # 128 to train on: 8 steps an epoch
    tiny["train"]["epochs"] = 3
    tiny["schedule"] = {"name": "onecycle"}
    tiny["checkpoint"] = {"every_steps": 3}
    return write_recipe(tiny)


@pytest.mark.slow
def test_a_crash_resumes_exactly_from_the_last_mid_epoch_checkpoint(recipe, tmp_path, monkeypatch, capsys):
    assert main(["train", str(recipe), "--out", str(tmp_path / "whole")]) == 0
    out = tmp_path / "crashed"
    with monkeypatch.context() as patch:
        callbacks = run_module._callbacks
        patch.setattr(run_module, "_callbacks", lambda *a: callbacks(*a) + [_CrashAt(13)])
        with pytest.raises(RuntimeError, match="crashed on purpose"):
            main(["train", str(recipe), "--out", str(out)])
    state = load_checkpoint(out / "checkpoints" / "last.pt")
    assert (state["epoch"], state["step"], state["batch_in_epoch"]) == (1, 12, 4)  # every 3 steps, mid-epoch
    assert main(["train", str(recipe), "--out", str(out), "--resume"]) == 0
    whole, resumed = _summary(tmp_path / "whole"), _summary(out)
    assert resumed.status == "completed" and resumed.steps == whole.steps == 24
    assert resumed.metrics == whole.metrics
    steps = lambda path: [r.step for r in read_metrics(path / "metrics.jsonl")]  # noqa: E731
    assert steps(out) == steps(tmp_path / "whole")  # each record once: those after step 12 were dropped, then rewritten
    capsys.readouterr()


def test_no_step_checkpoint_on_an_epochs_last_batch(recipe, tmp_path, monkeypatch):
    """Step 8 ends the first epoch: a mid-epoch state there would resume past the epoch's end."""
    saved = []
    real_save = checkpointing_module.save_checkpoint
    monkeypatch.setattr(
        checkpointing_module,
        "save_checkpoint",
        lambda state, path: saved.append((state["step"], state["batch_in_epoch"], path.name)) or real_save(state, path),
    )
    assert main(["train", str(recipe), "--out", str(tmp_path / "run"), "--set", "checkpoint.every_steps=4"]) == 0
    mid_epoch = [(step, batch) for step, batch, name in saved if batch]
    assert mid_epoch == [(4, 4), (12, 4), (20, 4)]
    assert [step for step, batch, name in saved if not batch and name == "last.pt"] == [8, 16, 24, 24]


def test_every_minutes_saves_when_the_time_has_come_at_a_logging_step(recipe, tmp_path, monkeypatch):
    clock = iter(range(0, 10_000, 20))  # 20 s later at each look
    monkeypatch.setattr(checkpointing_module, "monotonic", lambda: next(clock))
    saved = []
    monkeypatch.setattr(checkpointing_module, "save_checkpoint", lambda state, path: saved.append(state["step"]))
    # log.every_steps 2: the clock is read at even steps; a minute is three looks after the last save
    overrides = ["--set", "checkpoint.every_steps=0", "--set", "checkpoint.every_minutes=1", "--set", "train.epochs=1"]
    assert main(["train", str(recipe), "--out", str(tmp_path / "run"), *overrides]) == 0
    # steps 2 and 4: 20 and 40 s; step 6: 60 s, saved; step 8 ends the epoch: last.pt, epoch-001.pt, and the end
    assert saved == [6, 8, 8, 8]


def test_a_negative_cadence_is_refused_by_name(recipe, capsys):
    assert main(["train", str(recipe), "--set", "checkpoint.every_minutes=-1"]) == 2
    assert "checkpoint.every_minutes" in capsys.readouterr().err


@pytest.mark.parametrize(
    "dropped, said",
    [
        (
            ["rng", "callbacks"],
            "lacks callbacks, rng (written by an older accel); resuming without them: the "
            "callbacks' state starts afresh (early stopping's best value and patience); the random streams are seeded "
            "afresh",
        ),
        (["speedups", "batch_in_epoch", "meter"], "lacks speedups, batch_in_epoch, meter (written by an older accel)"),
    ],
)
def test_a_checkpoint_an_older_accel_wrote_resumes_and_says_what_it_lacks(
    tiny, write_recipe, tmp_path, capsys, caplog, dropped, said
):
    recipe, out = write_recipe(tiny), tmp_path / "run"
    assert main(["train", str(recipe), "--out", str(out)]) == 0
    last = out / "checkpoints" / "last.pt"
    state = torch.load(last, weights_only=True)
    torch.save({key: value for key, value in state.items() if key not in dropped}, last)
    with caplog.at_level("WARNING", logger="accel"):
        assert main(["train", str(recipe), "--out", str(out), "--resume", "--set", "train.epochs=3"]) == 0
    assert said in caplog.text and "Traceback" not in capsys.readouterr().err
    assert _summary(out).status == "completed" and _summary(out).epochs == 3


def test_a_checkpoint_without_what_every_resume_needs_is_refused_by_name(tiny, write_recipe, tmp_path, capsys):
    recipe, out = write_recipe(tiny), tmp_path / "run"
    assert main(["train", str(recipe), "--out", str(out)]) == 0
    last = out / "checkpoints" / "last.pt"
    state = torch.load(last, weights_only=True)
    torch.save({key: value for key, value in state.items() if key != "step"}, last)
    before = last.read_bytes()
    assert main(["train", str(recipe), "--out", str(out), "--resume", "--set", "train.epochs=3"]) == 2
    err = capsys.readouterr().err
    assert f"error: {last} is not a checkpoint written by accel: " in err and ", without step." in err
    assert "Traceback" not in err and last.read_bytes() == before
