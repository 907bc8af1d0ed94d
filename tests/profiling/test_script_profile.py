"""`accel profile -- python train.py`: the profile window inside a user's own script (accel/profile/script.py)."""

from __future__ import annotations

import copy
import json
import sys
from types import SimpleNamespace

import pytest
import torch

from accel.cli import main
from accel.profile.advice import advise
from accel.trial.instrument.profiled import UnchangedRun
from conftest import ROOT
from tests.profiling.test_advice import data_bound, quiet, slow_optimizer

# An engine loop with everything the engine can see: its loader, eng.autocast() around forward and loss
LOOP = """
import sys, torch, accel
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
eng = accel.Engine(device="cpu")
model, optimizer = eng.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
loader = eng.setup_dataloaders(torch.utils.data.DataLoader(data, batch_size=8))
for step, (x, y) in enumerate(loader):
    if step == int(sys.argv[1]):
        break
    with eng.autocast():
        loss = torch.nn.functional.cross_entropy(model(x), y)
    eng.backward(loss)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
print("the script ran to its end", flush=True)
"""


def _script(tmp_path, text: str = LOOP):
    path = tmp_path / "train.py"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_a_scripts_steps_are_profiled_by_its_engine(tmp_path, capfd):
    out = tmp_path / "profile"
    argv = ["profile", "--warmup", "1", "--steps", "2", "--out", str(out), "--", sys.executable]
    assert main([*argv, str(_script(tmp_path)), "8"]) == 0
    report = json.loads((out / "profile.json").read_text())
    assert report["steps"] == 2 and report["command"].startswith("accel profile --warmup 1")
    phases = {row["phase"] for row in report["anatomy"]["phases"]}
    assert {"data", "to_device", "forward", "loss", "backward", "optimizer"} <= phases
    assert any(row["op"].startswith("0 (Linear)") for row in report["modules"])  # the model's own modules
    assert {"trace.json.gz", "profile.md", "profile.html"} <= {p.name for p in out.iterdir()}
    printed = capfd.readouterr().out
    assert "the script ran to its end" not in printed  # it ended after the window: 3 of its 8 steps
    assert str(out / "profile.html") in printed


@pytest.mark.slow
def test_a_two_engine_script_is_profiled_in_one_window_over_the_first_engine_to_step(tmp_path, capfd):
    out, own = tmp_path / "profile", tmp_path / "run"
    gan = ROOT / "tests" / "engine" / "gan_loop.py"
    argv = ["profile", "--warmup", "1", "--steps", "2", "--out", str(out), "--", sys.executable, str(gan)]
    assert main([*argv, "--out", str(own)]) == 0
    report = json.loads((out / "profile.json").read_text())
    assert report["steps"] == 2
    assert {"forward", "backward", "optimizer"} <= {row["phase"] for row in report["anatomy"]["phases"]}
    err = capfd.readouterr().err
    assert "Profiler is already enabled" not in err and "ended after" not in err
    assert not own.exists()  # the script's own records are its real run's


@pytest.mark.slow
def test_a_script_that_ends_before_its_window_says_so(tmp_path, capfd):
    out = tmp_path / "profile"
    assert main(["profile", "--out", str(out), "--", sys.executable, str(_script(tmp_path)), "2"]) == 2
    err = capfd.readouterr().err
    assert "no profile written" in err and "2 + 3 optimizer steps" in err and "exited with code 0" in err


@pytest.mark.slow
def test_a_script_that_never_steps_fails_with_one_message(tmp_path, capfd):
    out = tmp_path / "profile"
    assert main(["profile", "--out", str(out), "--", sys.executable, str(_script(tmp_path, "print(1)\n"))]) == 2
    assert "without stepping an optimizer" in capfd.readouterr().err and not out.exists()


def test_a_scripts_advice_benches_the_script_with_its_settings():
    report = copy.deepcopy(quiet())
    slow_optimizer(report)
    (advice,) = advise(report, ["python", "train.py", "--lr", "0.1"], ["speedups.amp.dtype=bf16"])
    assert advice["bench"] == (
        "accel bench --set=speedups.amp.dtype=bf16 --vary speedups.optim.impl=auto,fused "
        "--vary speedups.compiled_optimizer.enabled=false,true -- python train.py --lr 0.1"
    )
    report = copy.deepcopy(quiet())
    data_bound(report)
    (advice,) = advise(report, ["python", "train.py"])
    assert advice["bench"] is None and "script's DataLoader" in advice["fix"]  # its keys are a recipe's


# --- a script without an engine, unchanged: the instrument drives the window (accel/trial/instrument/profiled.py) --

PLAIN = """
import sys, torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, fused=sys.argv[2] == "fused")
loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,))), batch_size=8)
for step, (x, y) in enumerate(loader):
    if step == int(sys.argv[1]):
        break
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.save(model.state_dict(), "ckpt.pt")
print("the script ran to its end", flush=True)
"""


@pytest.mark.slow
def test_an_unchanged_scripts_steps_are_profiled_from_outside(tmp_path, capfd, monkeypatch):
    out = tmp_path / "profile"
    monkeypatch.chdir(tmp_path)
    argv = ["profile", "--warmup", "1", "--steps", "3", "--out", str(out), "--", sys.executable]
    assert main([*argv, str(_script(tmp_path, PLAIN)), "8", "fused"]) == 0
    report = json.loads((out / "profile.json").read_text())
    assert report["steps"] == 3 and report["facts"]["framework"] == "plain"
    assert report["facts"]["precision"] == "fp32" and report["facts"]["fused_optimizer"] is True
    assert report["facts"]["num_workers"] == 0
    phases = {row["phase"] for row in report["anatomy"]["phases"]}
    assert {"data", "forward", "backward", "optimizer"} <= phases
    assert any(row["op"].startswith("0 (Linear)") for row in report["modules"])
    assert "the script ran to its end" not in capfd.readouterr().out  # ended after its window
    assert not (tmp_path / "ckpt.pt").exists()  # its checkpoints went to the profile's own folder
    refused = ["profile", "--set", "speedups.amp.enabled=true", "--out", str(tmp_path / "p2"), "--", sys.executable]
    assert main([*refused, str(_script(tmp_path, PLAIN)), "8", "no"]) == 2  # no engine to take an engine setting
    assert "an accel.Engine setting, and" in capfd.readouterr().err and not (tmp_path / "p2").exists()


def test_an_unchanged_scripts_advice_is_in_its_own_terms():
    report = copy.deepcopy(quiet())
    report["facts"] |= {"framework": "hf", "precision": "fp32"}
    (advice,) = advise(report, ["python", "train_hf.py", "--output_dir", "out"])
    assert advice["fix"].endswith("(torch.autocast(device, torch.bfloat16)): the Hugging Face Trainer's --bf16")
    assert "Lightning" not in advice["fix"] and "speedups" not in advice["fix"]
    report["facts"] |= {"framework": "lightning"}
    assert advise(report, ["python", "cli.py", "fit"])[0]["fix"].endswith(
        ": Lightning's --trainer.precision bf16-mixed"
    )
    assert advice["bench"] == "accel bench --ablate -- python train_hf.py --output_dir out"
    report["facts"] |= {"framework": "plain"}
    (advice,) = advise(report, ["python", "train.py"])
    assert advice["bench"] is None  # a plain loop's own options are all a bench can change
    report["facts"]["switches"] = {"mixed precision": "--amp --amp-dtype bfloat16", "channels-last": "--cl"}
    (advice,) = advise(report, ["python", "train.py"])  # timm's own switch for it, proved by its --ablate
    assert advice["fix"].endswith(": the script's own --amp --amp-dtype bfloat16") and "--cl" not in advice["fix"]
    assert "Trainer" not in advice["fix"] and "Lightning" not in advice["fix"]  # not another framework's flag
    assert advice["bench"] == "accel bench --ablate -- python train.py"
    report = copy.deepcopy(quiet())
    slow_optimizer(report)
    report["facts"] |= {"framework": "plain", "fused_optimizer": True}
    assert advise(report, ["python", "train.py"]) == []  # fused already: nothing to add
    report["facts"]["fused_optimizer"] = False
    assert "fused=True" in advise(report, ["python", "train.py"])[0]["fix"]


def test_a_run_with_no_model_hooked_has_no_precision_to_advise_on():
    # with no model hooked (an optimizer over tensors no module holds) the forward's autocast was never seen:
    # "fp32" advised bf16 autocast to a script that may be under it
    def run(models):
        return UnchangedRun(SimpleNamespace(precision=None, models=models, anatomy=None))

    assert run([]).strategy.precision.name == "unknown"
    assert run([torch.nn.Linear(2, 2)]).strategy.precision.name == "fp32"
