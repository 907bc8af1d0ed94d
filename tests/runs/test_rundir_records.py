"""A run directory's records stay true through what users do to them: divergence after the last log line, a
SIGKILL and a resume, a recipe edited between runs, thousands of epochs, a full disk."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from accel.callbacks import Callback
from accel.cli import main
from accel.runs.records import StepRecord, read_metrics
from accel.train import run as run_module
from conftest import ROOT, Progress, wait_for_first_checkpoint


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


@pytest.mark.slow
def test_a_resume_after_sigkill_logs_each_step_once_in_strict_json(tiny, write_recipe, tmp_path):
    tiny["data"]["dataset"]["num_samples"] = 640  # 32 steps an epoch: the kill lands inside the second
    tiny["log"]["every_steps"] = 1
    recipe, out = write_recipe(tiny), tmp_path / "run"
    metrics = out / "metrics.jsonl"
    run = subprocess.Popen(
        [sys.executable, "-m", "accel.cli", "train", str(recipe), "--out", str(out), "--set", "train.epochs=30"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_first_checkpoint(out, run)
        progress = Progress(run)
        while True:  # frozen, it is read as it stands: killed once it has logged steps after its checkpoint
            assert run.poll() is None, "the run ended before logging past its checkpoint"
            progress.check("waiting for it to log past its checkpoint")
            run.send_signal(signal.SIGSTOP)
            saved = torch.load(out / "checkpoints" / "last.pt", weights_only=True)["step"]
            if _last_step(metrics) >= saved + 2:  # the records a resume would write a second time
                break
            run.send_signal(signal.SIGCONT)
            time.sleep(0.05)
    finally:
        run.kill()
        run.communicate(timeout=60)
    with metrics.open("a") as handle:
        handle.write('{"kind": "step", "epoch": 2, "st')  # a record cut mid-write
    assert (
        main(
            [
                "train",
                str(recipe),
                "--out",
                str(out),
                "--resume",
                "--set",
                "train.epochs=30",
                "--set",
                f"train.max_steps={saved + 3}",
            ]
        )
        == 0
    )
    for line in metrics.read_text().splitlines():
        strict(line)
    steps = [r.step for r in read_metrics(metrics) if isinstance(r, StepRecord)]
    assert steps == list(range(1, saved + 4))


def _last_step(metrics) -> int:
    lines = metrics.read_text().splitlines() if metrics.is_file() else []
    for line in reversed(lines):
        try:
            return json.loads(line)["step"]
        except ValueError:  # the line being written
            continue
    return 0


def test_cutting_metrics_keeps_the_records_up_to_the_checkpoint_step(tmp_path):
    from accel.runs.rundir import cut_metrics

    metrics = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"kind": "step", "step": s}) for s in (1, 2, 3, 4)] + ['{"kind": "ep']
    metrics.write_text("\n".join(lines))
    cut_metrics(metrics, 2)
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [1, 2]
    assert not list(tmp_path.glob(".*.tmp"))


def test_checkpoint_keep_counts_epochs_past_999_by_number(tmp_path):
    from types import SimpleNamespace

    from accel.callbacks import Checkpointer
    from accel.callbacks.checkpointing import CheckpointConfig
    from accel.runs.checkpoint import newest_intact
    from accel.runs.rundir import RunDir

    checkpointer = Checkpointer(RunDir(tmp_path), CheckpointConfig(every_epochs=1, keep=2))
    trainer = SimpleNamespace(step=0, epoch=0, state_dict=lambda: {"model": {"w": torch.ones(1)}})
    for epoch in (998, 999, 1000, 1001):
        trainer.epoch = epoch
        checkpointer.on_epoch_end(trainer, {})
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.glob("*.pt")) == ["epoch-1000.pt", "epoch-1001.pt", "last.pt"]
    assert newest_intact(folder / "last.pt") == folder / "epoch-1001.pt"


# a user's files beside accel's epoch-NNN.pt: other words, other digit counts, other scripts' digits, a folder
USERS = ["epoch-best.pt", "epoch-001-good.pt", "epoch-final.pt", "epoch-12.pt", "epoch-0005.pt", "epoch-٣٤٥.pt"]


def test_checkpoint_keep_rotates_only_the_files_accel_wrote(tmp_path):
    from types import SimpleNamespace

    from accel.callbacks import Checkpointer
    from accel.callbacks.checkpointing import CheckpointConfig
    from accel.runs.checkpoint import newest_intact
    from accel.runs.rundir import RunDir

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for name in USERS:
        torch.save({"mine": name}, folder / name)
    (folder / "epoch-007.pt").mkdir()
    checkpointer = Checkpointer(RunDir(tmp_path), CheckpointConfig(every_epochs=1, keep=2))
    trainer = SimpleNamespace(step=0, epoch=0, state_dict=lambda: {"model": {"w": torch.ones(1)}})
    for epoch in (1, 2, 3, 999, 1000):
        trainer.epoch = epoch
        checkpointer.on_epoch_end(trainer, {})
    left = {p.name for p in folder.iterdir()}
    assert left == {*USERS, "epoch-007.pt", "epoch-999.pt", "epoch-1000.pt", "last.pt"}
    assert all(torch.load(folder / name, weights_only=True) == {"mine": name} for name in USERS)  # untouched
    assert newest_intact(folder / "last.pt") == folder / "epoch-1000.pt"


def test_a_resumed_run_leaves_a_users_checkpoints_in_place(tiny, write_recipe, tmp_path):
    out = tmp_path / "run"
    assert main(["train", str(write_recipe(tiny)), "--out", str(out)]) == 0
    for name in USERS[:3]:  # the issue's: a best model, a good one, a final one, copied in between runs
        (out / "checkpoints" / name).write_bytes((out / "checkpoints" / "last.pt").read_bytes())
    assert main(["train", str(out / "recipe.yaml"), "--out", str(out), "--resume", "--set=train.epochs=4"]) == 0
    left = {p.name for p in (out / "checkpoints").iterdir()}
    assert left == {*USERS[:3], "epoch-003.pt", "epoch-004.pt", "last.pt"}  # keep: 2


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def _torch_no_space(state, handle):
    handle.write(b"PK partial")
    try:
        _no_space()
    except OSError:  # what torch's zip writer raises on a failed write, the OSError only as its context
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598") from None


@pytest.mark.parametrize("failure", [_no_space, _torch_no_space], ids=["oserror", "torch-runtimeerror"])
def test_a_full_disk_during_a_checkpoint_is_a_clear_error(tmp_path, monkeypatch, failure):
    from accel.errors import CheckpointError
    from accel.runs import checkpoint

    last = tmp_path / "last.pt"
    checkpoint.save_checkpoint({"model": {"w": torch.zeros(1000)}}, last)
    before = last.read_bytes()
    monkeypatch.setattr(checkpoint.torch, "save", failure)
    with pytest.raises(CheckpointError) as caught:
        checkpoint.save_checkpoint({"model": {"w": torch.zeros(250_000)}}, last)
    message = str(caught.value)
    assert f"Disk full: could not write checkpoint {last} (about 1.0 MB needed" in message
    assert f"The previous checkpoint {last} is intact" in message and "--resume" in message
    assert last.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_other_write_errors_are_not_called_a_full_disk(tmp_path, monkeypatch):
    from accel.runs import checkpoint

    monkeypatch.setattr(checkpoint.torch, "save", lambda *a: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with pytest.raises(OSError, match="I/O error"):
        checkpoint.save_checkpoint({}, tmp_path / "last.pt")
    assert not list(tmp_path.iterdir())


class _CtrlCAfterFirstEpoch(Callback):
    def on_epoch_end(self, trainer, record):
        if trainer.epoch == 1:
            os.kill(os.getpid(), signal.SIGINT)


def _interrupted(tiny, write_recipe, tmp_path, capsys, monkeypatch, **changes):
    """A run of 3 epochs stopped by Ctrl-C after its first: the run directory a resume continues."""
    tiny.update(changes, train={"epochs": 3})
    recipe, out = write_recipe(tiny), tmp_path / "run"
    with monkeypatch.context() as patch:
        callbacks = run_module._callbacks
        patch.setattr(run_module, "_callbacks", lambda *a: callbacks(*a) + [_CtrlCAfterFirstEpoch()])
        assert main(["train", str(recipe), "--out", str(out)]) == 130
    capsys.readouterr()
    return out


def test_a_resume_takes_the_optimizer_settings_of_the_edited_recipe(
    tiny, write_recipe, tmp_path, capsys, caplog, monkeypatch
):
    out = _interrupted(tiny, write_recipe, tmp_path, capsys, monkeypatch)
    text = (out / "recipe.yaml").read_text()
    assert "lr: 0.05" in text and "weight_decay: 0.0" in text
    (out / "recipe.yaml").write_text(
        text.replace("lr: 0.05", "lr: 0.01").replace("weight_decay: 0.0", "weight_decay: 0.0001")
    )
    caplog.set_level("INFO", logger="accel")
    assert main(["train", str(out / "recipe.yaml"), "--out", str(out), "--resume"]) == 0
    assert (
        "the recipe's optimizer settings replace the checkpoint's: optim.lr 0.05 -> 0.01, "
        "optim.weight_decay 0.0 -> 0.0001"
    ) in caplog.text
    group = torch.load(out / "checkpoints" / "last.pt", weights_only=True)["optimizer"]["param_groups"][0]
    assert group["lr"] == 0.01 and group["weight_decay"] == 0.0001


def test_a_new_learning_rate_under_a_schedule_is_refused_on_resume(tiny, write_recipe, tmp_path, capsys, monkeypatch):
    out = _interrupted(tiny, write_recipe, tmp_path, capsys, monkeypatch, schedule={"name": "cosine"})
    before = (out / "checkpoints" / "last.pt").read_bytes()
    assert main(["train", str(out / "recipe.yaml"), "--out", str(out), "--resume", "--set", "optim.lr=0.01"]) == 2
    err = capsys.readouterr().err
    assert (
        f"optim.lr is 0.01 in the recipe but 0.05 in checkpoint {out / 'checkpoints' / 'last.pt'}, and the "
        "learning-rate schedule in the checkpoint was planned around the old value"
    ) in err
    assert "Resume with optim.lr: 0.05" in err
    assert (out / "checkpoints" / "last.pt").read_bytes() == before


def test_a_full_disk_writing_summary_or_metrics_is_a_clear_error(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from accel.callbacks import RunDirWriter
    from accel.errors import AccelError
    from accel.runs.records import LoopRecord
    from accel.runs.rundir import RunDir

    run_dir = RunDir(tmp_path)
    run_dir.write_json("summary.json", {"status": "completed"})
    monkeypatch.setattr("accel.io.os.fsync", _no_space)  # where a full disk surfaces when the data is flushed
    with pytest.raises(
        AccelError,
        match=rf"Disk full: could not write {tmp_path / 'summary.json'} \(\d+ bytes\); "
        "its previous version is intact",
    ):
        run_dir.write_json("summary.json", {"status": "failed"})
    assert strict((tmp_path / "summary.json").read_text()) == {"status": "completed"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
    monkeypatch.setattr("accel.callbacks.run_dir_writer.os.write", _no_space)
    with pytest.raises(AccelError, match=f"Disk full: could not append a record to {tmp_path / 'metrics.jsonl'}"):
        RunDirWriter(run_dir).on_log(SimpleNamespace(), LoopRecord(step=1))
