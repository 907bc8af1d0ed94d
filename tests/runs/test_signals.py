"""Signals from the first byte a run writes to its last: start-up, the loop, the final checkpoint and summary.

Each test sends SIGINT to its own process at one moment of an in-process `accel train`, as a Ctrl-C would; SIGHUP
(a closed terminal) is tested like SIGTERM, and once for real, in a process whose terminal closes."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import select
import shlex
import signal
import subprocess
import sys

import pytest
import torch

from accel.callbacks import Checkpointer
from accel.cli import main as cli_main
from accel.runs.records import read_summary
from accel.runs.rundir import RunDir
from conftest import ROOT, Progress, finish


def ctrl_c(times: int = 1) -> None:
    for _ in range(times):
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs before os.kill returns


def main(argv: list[str]) -> int:
    """`accel ARGV` in this process; a signal escaping it fails the test instead of stopping pytest."""
    try:
        return cli_main(argv)
    except KeyboardInterrupt as escaped:
        pytest.fail(f"a signal escaped accel train as {type(escaped).__name__}")


def run_files(out) -> set[str]:
    return {p.name for p in out.iterdir()}


def test_a_signal_in_start_up_leaves_a_directory_a_new_run_can_use(tiny, write_recipe, tmp_path, capsys, monkeypatch):
    import accel.train.run

    build = accel.train.run.build_trainer
    monkeypatch.setattr(accel.train.run, "build_trainer", lambda *a, **k: (ctrl_c(), build(*a, **k))[1])
    recipe, out = write_recipe(tiny), tmp_path / "run"
    assert main(["train", str(recipe), "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert f"interrupted during start-up, before anything was written to {out}; run the same command again" in err
    assert "Traceback" not in err and not RunDir(out).holds_run()
    monkeypatch.setattr(accel.train.run, "build_trainer", build)
    assert main(["train", str(recipe), "--out", str(out)]) == 0


def test_a_signal_before_the_first_step_ends_with_a_checkpoint_and_the_quoted_resume_command(
    tiny, write_recipe, tmp_path, capsys, monkeypatch
):
    from accel.train.trainer import Trainer

    fit = Trainer.fit
    monkeypatch.setattr(Trainer, "fit", lambda self: (ctrl_c(), fit(self))[1])  # recipe.yaml is written by now
    out = tmp_path / "a run dir"  # spaces: the printed command must still work in a shell
    assert main(["train", str(write_recipe(tiny)), "--out", str(out)]) == 130
    printed = capsys.readouterr().err.strip().splitlines()[-1]
    assert printed == f"interrupted; continue with: accel train '{out}/recipe.yaml' --out '{out}' --resume"
    assert read_summary(out / "summary.json").status == "interrupted"
    assert torch.load(out / "checkpoints" / "last.pt", weights_only=True)["step"] == 0
    monkeypatch.setattr(Trainer, "fit", fit)
    argv = shlex.split(printed.split("continue with: accel ", 1)[1])
    assert main(argv) == 0
    resumed = read_summary(out / "summary.json")
    assert resumed.status == "completed" and resumed.epochs == 2


def test_a_second_signal_during_the_final_save_is_acknowledged_and_the_save_completes(
    tiny, write_recipe, tmp_path, caplog, monkeypatch
):
    end = Checkpointer.on_fit_end

    def signalled_end(self, trainer, summary):
        ctrl_c(2)  # the loop is over: both are acknowledged, neither stops the save
        end(self, trainer, summary)

    monkeypatch.setattr(Checkpointer, "on_fit_end", signalled_end)
    out = tmp_path / "run"
    assert main(["train", str(write_recipe(tiny)), "--out", str(out)]) == 0  # it completed: the signals came late
    assert caplog.text.count("saving, please wait") == 2
    summary = read_summary(out / "summary.json")
    assert summary.status == "completed"
    assert torch.load(out / "checkpoints" / "last.pt", weights_only=True)["step"] == summary.steps > 0


def test_a_third_signal_stops_at_once_and_leaves_the_previous_checkpoint_intact(
    tiny, write_recipe, tmp_path, capsys, monkeypatch
):
    out, final = tmp_path / "run", []
    save, end = torch.save, Checkpointer.on_fit_end
    last = out / "checkpoints" / "last.pt"

    def signalled_end(self, trainer, summary):
        final.append(hashlib.sha256(last.read_bytes()).hexdigest())
        end(self, trainer, summary)

    def interrupted_save(obj, handle, *args, **kwargs):
        if final:  # half of the final checkpoint written when the signals come
            handle.write(b"half a checkpoint")
            ctrl_c(3)
        return save(obj, handle, *args, **kwargs)

    monkeypatch.setattr(Checkpointer, "on_fit_end", signalled_end)
    monkeypatch.setattr(torch, "save", interrupted_save)
    recipe = write_recipe(tiny)
    assert main(["train", str(recipe), "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert (
        "stopped at once, without the final checkpoint and summary; checkpoints/last.pt is the previous "
        f"checkpoint, intact; continue with: accel train {out}/recipe.yaml --out {out} --resume" in err
    )
    assert hashlib.sha256(last.read_bytes()).hexdigest() == final[0]
    assert run_files(out / "checkpoints") == {"last.pt", "epoch-001.pt", "epoch-002.pt"}  # no temporary file
    assert not (out / "summary.json").exists()
    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(Checkpointer, "on_fit_end", end)
    assert main(["train", str(recipe), "--out", str(out), "--resume"]) == 0
    assert read_summary(out / "summary.json").status == "completed"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_sighup_ends_a_run_exactly_as_sigterm_does(tiny, write_recipe, tmp_path, capsys, monkeypatch, signum):
    recipe, whole, out = write_recipe(tiny), tmp_path / "whole", tmp_path / "stopped"
    assert main(["train", str(recipe), "--out", str(whole)]) == 0
    batch_end, batches = Checkpointer.on_batch_end, []

    def signalled(self, trainer, info):
        batch_end(self, trainer, info)
        batches.append(info)
        if len(batches) == 2:  # mid-epoch: an epoch has 3 steps, one batch each
            os.kill(os.getpid(), signum)

    with monkeypatch.context() as patch:
        patch.setattr(Checkpointer, "on_batch_end", signalled)
        assert main(["train", str(recipe), "--out", str(out)]) == 130
    assert f"interrupted; continue with: accel train {out}/recipe.yaml --out {out} --resume" in capsys.readouterr().err
    summary = read_summary(out / "summary.json")
    assert summary.status == "interrupted" and summary.steps == 2
    assert torch.load(out / "checkpoints" / "last.pt", weights_only=True)["step"] == 2
    assert (out / ".lock").read_text() == ""  # released: no dead PID left behind
    assert main(["train", str(out / "recipe.yaml"), "--out", str(out), "--resume"]) == 0
    resumed = read_summary(out / "summary.json")
    assert resumed.status == "completed"
    assert resumed.metrics == read_summary(whole / "summary.json").metrics


def test_sighup_is_handled_unless_ignored_as_nohup_wants():
    from accel.runs import signals

    previous = signal.getsignal(signal.SIGHUP)
    try:
        for before, inside in [(signal.SIG_DFL, "handled"), (signal.SIG_IGN, signal.SIG_IGN)]:
            signal.signal(signal.SIGHUP, before)
            for block in (signals.stop_requests(lambda signum: None), signals.abort_on_signals()):
                with block:
                    handler = signal.getsignal(signal.SIGHUP)
                    assert handler == inside if inside == signal.SIG_IGN else callable(handler)
                assert signal.getsignal(signal.SIGHUP) == before
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.mark.slow
def test_a_closed_terminal_ends_a_run_with_its_checkpoint_and_summary(tiny, write_recipe, tmp_path, capsys):
    """The real thing: the run writes to a terminal (progress bar, log), the terminal closes (every later write
    fails with EIO) and its shell sends SIGHUP to the job's process group, loader workers included."""
    tiny["data"]["loader"] = {"num_workers": 1, "workers_kind": "processes"}
    tiny["train"]["epochs"] = 100_000  # until the terminal closes
    tiny["log"]["progress"] = True
    recipe, out = write_recipe(tiny), tmp_path / "run"
    terminal, tty = pty.openpty()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen(
        [sys.executable, "-m", "accel.cli", "train", str(recipe), "--out", str(out)],
        cwd=ROOT,
        env=env,
        stdin=tty,
        stdout=tty,
        stderr=tty,
        start_new_session=True,  # a job of its own, as a shell starts it
    )
    os.close(tty)
    try:
        progress = Progress(run)
        # well into training, its workers running (the epoch checkpoints rotate, so any after the first)
        while not [p for p in (out / "checkpoints").glob("epoch-*.pt") if p.name != "epoch-001.pt"]:
            assert run.poll() is None, "the run ended before its second epoch"
            progress.check("waiting for its second epoch")
            while select.select([terminal], [], [], 0.05)[0]:  # read what it writes, or its writes block
                os.read(terminal, 65536)
        os.close(terminal)
        os.killpg(run.pid, signal.SIGHUP)
        finish(run)
        assert run.returncode == 130
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    summary = read_summary(out / "summary.json")
    assert summary.status == "interrupted" and summary.steps >= 6
    assert torch.load(out / "checkpoints" / "last.pt", weights_only=True)["step"] == summary.steps
    assert (out / ".lock").read_text() == ""
    more = [f"--set=train.max_steps={summary.steps + 2}", "--set=data.loader.num_workers=0"]  # pytest: no stderr fd
    assert main(["train", str(out / "recipe.yaml"), "--out", str(out), "--resume", *more]) == 0
    assert read_summary(out / "summary.json").steps == summary.steps + 2


def _ctrl_c_in_evaluation(monkeypatch) -> list[int]:
    """Ctrl-C as the first validation batch is evaluated; the list counts the batches evaluated after it."""
    from accel.train import evaluation

    sums, evaluated = evaluation._eval_sums, []

    def signalled(trainer, batch):
        if not evaluated:
            ctrl_c()
        evaluated.append(1)
        return sums(trainer, batch)

    monkeypatch.setattr(evaluation, "_eval_sums", signalled)
    return evaluated


def _with_five_val_batches(tiny: dict) -> dict:
    tiny["data"]["dataset"]["num_samples"] = 200  # 40 validation samples: 5 batches of 8
    tiny["data"]["batch_size"] = 8
    return tiny


def test_ctrl_c_in_the_final_evaluation_stops_it_and_the_run_is_interrupted_then_resumes(
    tiny, write_recipe, tmp_path, capsys, monkeypatch
):
    tiny = _with_five_val_batches(tiny)
    tiny["train"] |= {"epochs": 1, "eval_every_epochs": 0}  # the only evaluation is the final one
    recipe, out = write_recipe(tiny), tmp_path / "run"
    evaluated = _ctrl_c_in_evaluation(monkeypatch)
    assert main(["train", str(recipe), "--out", str(out)]) == 130  # was "completed", exit 0
    assert len(evaluated) == 1  # the pass stopped at the next batch, not after all 5
    summary = read_summary(out / "summary.json")
    assert summary.status == "interrupted" and summary.metrics["val_loss"] is None
    assert "interrupted; continue with:" in capsys.readouterr().err
    monkeypatch.undo()
    assert main(["train", str(recipe), "--out", str(out), "--resume"]) == 0  # the pass runs whole on resume
    summary = read_summary(out / "summary.json")
    assert summary.status == "completed" and summary.metrics["val_loss"] > 0


@pytest.mark.slow
def test_ctrl_c_in_an_evaluation_between_epochs_stops_it_and_keeps_no_partial_metrics(
    tiny, write_recipe, tmp_path, monkeypatch
):
    tiny = _with_five_val_batches(tiny)
    out = tmp_path / "run"
    evaluated = _ctrl_c_in_evaluation(monkeypatch)  # in epoch 1's evaluation, of 2 epochs
    assert main(["train", str(write_recipe(tiny)), "--out", str(out)]) == 130
    assert len(evaluated) == 1
    summary = read_summary(out / "summary.json")
    assert summary.status == "interrupted" and summary.epochs == 1
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert not any("val_loss" in r for r in records)  # no metrics of a fifth of the set
