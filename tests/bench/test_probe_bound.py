"""Never a whole training by accident, whatever fails inside accel: a probe or trial whose step recorder did not
start is ended by the steps accel's other hooks saw (accel/trial/instrument/guard.py), the probe says what it waits
for and what it stopped (accel/bench/probe_watch.py), its messages never blame the script for what accel failed to
see, and a framework's outputs go to the trial's own folder whether or not the recorder started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from accel.bench import probe_watch
from accel.bench.probe_watch import ProbeWatch
from accel.bench.records import Trial
from accel.bench.trial_process import instrumented_pythonpath
from accel.cli import main
from accel.engine import trial_variables
from conftest import ROOT, finish, wait_until

LOOP = """
import os, sys, time
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 10_000):
    model(torch.randn(8, 4)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    print("step", step, flush=True)
"""
# what fails inside accel, put in by a sitecustomize that runs after the instrument's (which chains to it)
MISSED_TORCH = """
import sys  # the import watch misses torch, as it did after a look-up of it
for finder in sys.meta_path:
    getattr(finder, "watched", {}).pop("torch", None)
"""
RECORDER_FAILS = """
import sys
sys.modules["accel.trial.instrument.recorder"] = None  # importing the recorder raises: its start fails
"""


def _failing(tmp_path: Path, monkeypatch, sitecustomize: str) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(sitecustomize)
    monkeypatch.setenv("PYTHONPATH", str(site))  # after the instrument's site on a trial's PYTHONPATH


def _script(tmp_path: Path, text: str = LOOP) -> str:
    path = tmp_path / "train.py"
    path.write_text(text)
    return str(path)


@pytest.mark.slow
def test_a_probe_whose_recorder_failed_to_start_ends_at_the_first_step_torch_saw_and_says_so(
    tmp_path, monkeypatch, capsys
):
    _failing(tmp_path, monkeypatch, RECORDER_FAILS)
    assert main(["bench", "--vary", "arg:--x=1,2", "--list", "--", sys.executable, _script(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("probe: running the script until it starts training")  # at once, before its imports
    assert "accel's step recorder did not start" in err and "this is accel's failure, not the script's" in err
    assert "torch's optimizer-step hook saw 1 optimizer step(s), and accel stopped the script there" in err
    assert "step 1" not in err  # ended inside its first step (printed after it)


@pytest.mark.slow
def test_a_trial_whose_recorder_failed_to_start_ends_at_its_steps_with_accels_failure(tmp_path, monkeypatch):
    _failing(tmp_path, monkeypatch, RECORDER_FAILS)
    record = tmp_path / "trial.json"
    variables = {"PYTHONPATH": instrumented_pythonpath(), trial_variables.PATH: str(record)}
    variables |= {trial_variables.STEPS: "2", trial_variables.WARMUP: "1"}
    command = [sys.executable, _script(tmp_path)]
    done = subprocess.run(command, env=os.environ | variables, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.split() == ["step", "1", "step", "2"]  # ended in 1 + 2's last
    assert "accel's step recorder did not start" in Trial.model_validate_json(record.read_text()).error


@pytest.mark.slow
def test_a_script_that_ended_where_accels_recorder_missed_torch_is_not_blamed(tmp_path, monkeypatch, capsys):
    _failing(tmp_path, monkeypatch, MISSED_TORCH)
    ends = LOOP.replace("range(1, 10_000)", "range(1, 4)")
    assert main(["bench", "--vary", "arg:--x=1,2", "--list", "--", sys.executable, _script(tmp_path, ends)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "accel's step recorder did not start in it although it imported torch" in err
    assert "This is accel's failure, not the script's: its own log shows its steps" in err and "step 3" in err
    assert "without stepping an optimizer" not in err


def _notes(tmp_path: Path, *notes: dict) -> ProbeWatch:
    record = tmp_path / "given.json"
    for pid, note in enumerate(notes):
        (tmp_path / f"given.json.{pid}.note").write_text(json.dumps(note))
    return ProbeWatch(record, 900)


def test_a_probe_says_what_it_waits_for_and_is_stopped_when_a_seen_step_does_not_end_it(tmp_path, capsys):
    watch = _notes(tmp_path, {"torch": True, "recorder": False, "steps": {}})
    assert not watch(1.0) and capsys.readouterr().err == ""
    assert not watch(probe_watch.PROGRESS_S)
    said = capsys.readouterr().err
    assert said.startswith(f"probe: {probe_watch.PROGRESS_S:.0f} s, no optimizer step seen yet;")
    assert "accel's step recorder did not start (torch is imported)" in said
    (tmp_path / "given.json.0.note").write_text(json.dumps({"torch": True, "recorder": False, "steps": {"x": 1}}))
    assert not watch(40.0)  # a step seen at 40 s: as long again as it took (40 s, at least GRACE_S) to end
    assert not watch(80.0) and watch(80.5)
    assert watch.stopped.startswith("x saw 1 optimizer step(s), the first 40 s ago")


@pytest.mark.parametrize(
    "notes, said",
    [
        ((), probe_watch.NO_INSTRUMENT),
        (({"torch": False, "recorder": False, "steps": {}},), probe_watch.NO_TORCH),
        (({"torch": True, "recorder": False, "steps": {}},), probe_watch.NO_RECORDER),
        (({"torch": False, "recorder": False, "steps": {}}, {"torch": True, "recorder": True, "steps": {}}), None),
    ],
)
def test_a_probe_that_ended_without_a_record_says_what_accel_saw(tmp_path, notes, said):
    got = _notes(tmp_path, *notes).ended_without_record("python train.py")
    assert got == (said or probe_watch.NEVER_STEPPED).format(command="python train.py", seen="")


@pytest.mark.slow
def test_sigterm_during_the_probe_ends_it_and_says_what_it_stopped(tmp_path):
    cache = tmp_path / "cache"  # the user's cache folder: what the probe writes there is written for real
    cache.mkdir()
    started = cache / "started"
    waits = f"import pathlib, time, torch\npathlib.Path({str(started)!r}).write_text('')\ntime.sleep(600)\n"
    argv = [sys.executable, "-m", "accel.cli", "bench", "--vary", "arg:--x=1,2", "--list", "--"]
    env = os.environ | {"XDG_CACHE_HOME": str(cache)}
    bench = subprocess.Popen(
        [*argv, sys.executable, _script(tmp_path, waits)], stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env
    )
    wait_until(started.exists, bench, "the probe's script to start")
    bench.send_signal(signal.SIGTERM)
    _, err = finish(bench)
    assert bench.returncode == 130, err
    assert "probe: stopped after" in err and "were ended before the probe was done; no trial ran" in err


@pytest.mark.slow
def test_a_trainer_scripts_probe_without_the_recorder_stops_at_its_first_step_and_keeps_its_output_dir(
    tmp_path, monkeypatch, capsys
):
    _failing(tmp_path, monkeypatch, MISSED_TORCH)
    output_dir = tmp_path / "hf-out"
    script = [sys.executable, str(ROOT / "examples" / "hf_trainer.py"), "--output_dir", str(output_dir)]
    argv = ["bench", "--vary", "arg:--seed=1,2", "--list", "--", *script, "--report_to", "none", "--save_steps", "1"]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "accel's step recorder did not start" in err and "saw 1 optimizer step(s)" in err
    assert not output_dir.exists() or not any(output_dir.iterdir())


@pytest.mark.slow
def test_a_lightning_scripts_probe_without_the_recorder_stops_at_its_first_step_and_keeps_its_root(
    tmp_path, monkeypatch, capsys
):
    _failing(tmp_path, monkeypatch, MISSED_TORCH)
    root = tmp_path / "runs"
    script = [sys.executable, str(ROOT / "examples" / "lightning_cli.py"), "fit", "--trainer.default_root_dir"]
    argv = ["bench", "--vary", "arg:--seed_everything=1,2", "--list", "--", *script, str(root)]
    assert main([*argv, "--trainer.enable_progress_bar", "false"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "accel's step recorder did not start" in err and "saw 1 optimizer step(s)" in err
    assert not root.exists()  # its logs and LightningCLI's config.yaml went to the probe's own folder
