"""`accel bench -- python train.py`: a user's own script benched through its accel.Engine, each trial a fresh
process of it (accel/bench/script.py), its steps measured by the engine (accel/trial/engine_agent.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch

import accel
from accel.bench.records import Trial
from accel.bench.script_options import with_option
from accel.cli import main
from accel.cli.script_args import split
from accel.engine import process_observers, trial_variables
from accel.errors import AccelError
from accel.trial import dispatch
from accel.trial.engine_agent import Joined
from conftest import ROOT, syncs_by_caller

GAN = ROOT / "tests" / "engine" / "gan_loop.py"  # two engines: one per model and optimizer

# A few-line engine loop on random tensors; `crash` raises in the step of a bf16 variant.
LOOP = """
import argparse
import torch
import accel

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=8)
args = parser.parse_args()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
eng = accel.Engine(speedups={{"amp": {{"dtype": "bf16"}}}}, device="cpu")
model, optimizer = eng.setup(model, optimizer)
for step in range(20):
    loss = torch.nn.functional.cross_entropy(model(torch.randn(args.batch, 16)), torch.randint(0, 4, (args.batch,)))
    eng.backward(loss)
    if {crash} and eng.summary()["precision"] == "bf16":
        raise RuntimeError("boom: this variant crashes")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    eng.log({{"val_loss": loss.item()}})
"""
SHORT = ["--steps", "3", "--warmup", "1", "--trials", "2", "--timeout", "120"]


def script(tmp_path, crash: bool = False, text: str | None = None):
    path = tmp_path / "train.py"
    path.write_text(text if text is not None else LOOP.format(crash=crash))
    return path


def report(out) -> dict:
    return json.loads((out / "report.json").read_text())


# the speed-ups --ablate would add to the script's own that this machine can run, turned off (as a user keeps one
# out of an ablation): the tests that run trials keep to the script's amp
OWN_ONLY = ["--set", "speedups.compile.enabled=false", "--set", "speedups.optim.enabled=false"]


@pytest.mark.slow
def test_ablate_benches_the_scripts_own_speedups(tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", "--ablate", *SHORT, *OWN_ONLY, "--out", str(out), "--", sys.executable, str(script(tmp_path))]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[0] == str(out)
    got = report(out)
    assert [v["name"] for v in got["variants"]] == ["baseline", "+amp"]  # the script's engine was given amp only
    assert got["speedups"]["amp"]["added"]["median"] > 0 and got["recipe"].endswith("train.py")
    assert got["recipes"]["baseline"]["ACCEL_SET"] == (
        "speedups.compile.enabled=false speedups.optim.enabled=false speedups.amp.enabled=false"
    )
    assert got["variants"][0]["trials"][0]["model_traits"] == {
        "has_conv": False,
        "has_attention": False,
        "repeated_blocks": False,
    }
    for variant in got["variants"]:
        assert variant["ok_trials"] == 2 and variant["final_loss"] > 0
        assert variant["samples_per_s"]["median"] > 0 and len(variant["samples_per_s"]["ci95"]) == 2
        for trial in variant["trials"]:
            assert len(trial["step_times_s"]) == 3 and len(trial["step_losses"]) == 4 and trial["first_step_s"] > 0
            assert trial["forked_s"] > 0  # from its variant's zygote, which imported what the probe's script had
    order = sorted((t for v in got["variants"] for t in v["trials"]), key=lambda t: t["index"])
    assert [t["variant"] for t in order] == ["baseline", "+amp"] * 2  # interleaved
    for name in ("report.md", "report.html"):
        assert (out / name).is_file()
    assert "amp:" in (out / "report.md").read_text()


@pytest.mark.slow
def test_ablate_adds_the_speedups_this_device_runs_and_the_model_uses(tmp_path, capsys):
    linear = script(tmp_path)
    conv = tmp_path / "conv.py"
    conv.write_text(
        linear.read_text().replace(
            "torch.nn.Sequential(torch.nn.Linear(16, 32)",
            "torch.nn.Sequential(torch.nn.Unflatten(1, (1, 4, 4)), torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(), "
            "torch.nn.Linear(8, 32)",
        )
    )
    listed = {}
    for path in (linear, conv):
        assert main(["bench", "--ablate", "--list", "--", sys.executable, str(path)]) == 0
        listed[path.stem] = dict(line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines())
    # the script's amp; the fused optimizer and compile it was not given; channels_last only with convolutions
    assert {"+amp", "+optim", "+compile"} <= listed["train"].keys() and "+channels_last" not in listed["train"]
    assert "+channels_last" in listed["conv"]
    assert listed["train"]["baseline"] == "speedups.amp.enabled=false"  # an added speed-up off: not listed at all
    assert "speedups.optim.enabled=true speedups.optim.impl=fused" in listed["train"]["-amp"]
    assert main(["bench", "--ablate", "--list", *OWN_ONLY, "--", sys.executable, str(linear)]) == 0
    assert "+optim" not in capsys.readouterr().out  # one the user turned off stays off


@pytest.mark.slow
def test_warm_cache_shares_one_inductor_cache_across_the_scripts_trials(tmp_path):
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "speedups.compile.enabled=true", "--steps", "1", "--warmup", "1", "--trials", "2"]
    assert main([*argv, "--warm-cache", "--out", str(out), "--", sys.executable, str(script(tmp_path))]) == 0
    got = report(out)
    assert got["settings"]["compile_cache"] == "warm (shared)"  # as a recipe's trials
    assert any((out / "inductor-cache").iterdir())  # the first trial's compilations, where the second looks
    assert not list((out / "trials").glob("*.inductor-cache"))  # no trial's own cold folder
    first, second = sorted(got["variants"][0]["trials"], key=lambda t: t["index"])
    assert first["compile_s"] > 0 and second["compile_s"] > 0


@pytest.mark.slow
def test_vary_takes_an_engine_key_and_the_scripts_own_option(tmp_path):
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "speedups.amp.enabled=false", "--vary", "arg:--batch=4,6", "--trials", "1"]
    command = ["--", sys.executable, str(script(tmp_path)), "--batch", "8"]
    assert main([*argv, "--steps", "2", "--warmup", "1", "--target", "val_loss=100", "--out", str(out), *command]) == 0
    got = report(out)
    assert all(v["time_to_target_s"] > 0 and v["target_reached"] == 1 for v in got["variants"])
    assert "time to val_loss=100 s" in (out / "report.md").read_text()
    names = ["speedups.amp.enabled=false,arg:--batch=4", "speedups.amp.enabled=false,arg:--batch=6"]
    assert [v["name"] for v in got["variants"]] == names
    assert [v["trials"][0]["batch_size"] for v in got["variants"]] == [4, 6]
    assert got["recipes"][names[1]]["command"].endswith("train.py --batch 6")
    assert got["recipes"][names[1]]["speedups"]["amp"]["enabled"] is False


def test_a_scripts_option_is_replaced_where_given_and_appended_where_not():
    assert with_option(["python", "t.py", "--batch", "8", "--lr=1"], "--batch", "16") == [
        "python",
        "t.py",
        "--batch",
        "16",
        "--lr=1",
    ]
    assert with_option(["python", "t.py", "--lr=1"], "--lr", "2") == ["python", "t.py", "--lr=2"]
    # appended in the one form nanoGPT's configurator reads too (it takes `--key=value` only)
    assert with_option(["python", "t.py"], "--lr", "2") == ["python", "t.py", "--lr=2"]
    assert with_option(["python", "t.py"], "-b", "2") == ["python", "t.py", "-b", "2"]
    with pytest.raises(AccelError, match="with its dashes"):
        with_option(["python", "t.py"], "batch", "2")


def test_an_option_given_twice_is_replaced_both_times():
    # the script's parser takes the last: replacing only the first left every variant running with the last value
    command = ["python", "t.py", "--batch", "32", "--lr=1", "--batch=64"]
    assert with_option(command, "--batch", "8") == ["python", "t.py", "--batch", "8", "--lr=1", "--batch=8"]


@pytest.mark.slow
def test_a_crashing_variant_leaves_a_report_of_the_others(tmp_path, capsys):
    out = tmp_path / "bench"
    path = script(tmp_path, crash=True)
    argv = ["bench", "--vary", "speedups.amp.enabled=false,true", *SHORT, "--out", str(out), str(path)]
    assert main(argv) == 0  # the bare `train.py` form: run under this Python
    assert "## Failed trials" in capsys.readouterr().out
    good, bad = report(out)["variants"]
    assert good["name"] == "speedups.amp.enabled=false" and good["ok_trials"] == 2 and good["errors"] == 0
    assert bad["errors"] == 2 and bad["samples_per_s"]["median"] is None
    assert all("boom: this variant crashes" in t["error"] for t in bad["trials"])
    assert "boom: this variant crashes" in (out / "report.md").read_text()


# Each variant fails its own way, chosen by the amp init_scale (harmless under bf16) the bench sets for it.
FAILING = """
import os, signal
import torch
import accel

how = {"speedups.amp.init_scale=2": "diverge", "speedups.amp.init_scale=3": "kill"}.get(os.environ["ACCEL_SET"])
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
eng = accel.Engine(speedups={"amp": {"dtype": "bf16"}}, device="cpu")
model, optimizer = eng.setup(model, optimizer)
for step in range(20):
    loss = model(torch.randn(4, 8)).sum() * (float("nan") if how == "diverge" and step == 2 else 1.0)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    eng.backward(loss)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
"""


@pytest.mark.slow
def test_a_diverging_and_a_killed_variant_leave_a_report_of_the_others(tmp_path):
    out = tmp_path / "bench"
    path = script(tmp_path, text=FAILING)
    argv = ["bench", "--vary", "speedups.amp.init_scale=1,2,3", "--steps", "3", "--warmup", "1", "--trials", "1"]
    assert main([*argv, "--out", str(out), "--", sys.executable, str(path)]) == 0
    good, diverged, killed = report(out)["variants"]
    assert good["ok_trials"] == 1 and good["samples_per_s"]["median"] > 0
    assert diverged["errors"] == 1 and diverged["trials"][0]["error"].startswith("diverged: the training loss was nan")
    assert killed["errors"] == 1 and "killed by SIGKILL" in killed["trials"][0]["error"]


@pytest.mark.slow
def test_a_bench_whose_every_trial_failed_exits_1(tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "speedups.amp.init_scale=3", "--steps", "1", "--warmup", "0", "--trials", "1"]
    assert main([*argv, "--out", str(out), "--", sys.executable, str(script(tmp_path, text=FAILING))]) == 1
    assert "every trial failed" in capsys.readouterr().err and (out / "report.md").is_file()


@pytest.mark.slow
def test_a_script_without_an_engine_fails_with_one_message(tmp_path, capsys):
    path = script(tmp_path, text="import torch\nprint(torch.ones(2).sum())\n")
    out = tmp_path / "bench"
    assert main(["bench", "--ablate", "--out", str(out), "--", sys.executable, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("ran to its end without stepping an optimizer") == 1 and "nothing to measure" in err
    assert not out.exists()


@pytest.mark.slow
def test_a_module_missing_under_another_python_says_which_python_ran(tmp_path, monkeypatch, capsys):
    # `-- python train.py` with accel's venv not activated: PATH's python, without torch, ran the script
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    other = bin_dir / "python"
    other.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    other.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert main(["bench", "--ablate", "--out", str(tmp_path / "bench"), "--", "python", str(script(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert f"`python` is {other}, not the Python accel runs in ({sys.executable})" in err
    assert f"(`-- {tmp_path / 'train.py'}` runs under accel's Python)" in err


@pytest.mark.slow
def test_a_scripts_module_of_a_missing_extra_is_named_with_the_extras_pip_command(tmp_path, capsys):
    # as a Lightning script fails where the `lightning` extra is not installed
    path = script(tmp_path, text="raise ModuleNotFoundError(\"No module named 'lightning'\", name='lightning')\n")
    assert main(["bench", "--ablate", "--out", str(tmp_path / "bench"), "--", sys.executable, str(path)]) == 2
    said = "the script needs lightning, which is not installed: pip install 'accel[lightning]'"
    assert said in capsys.readouterr().err


@pytest.mark.slow
def test_a_bad_engine_key_fails_before_any_trial(tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "speedups.amp.dtyp=bf16,fp16", "--out", str(out), "--", sys.executable]
    assert main([*argv, str(script(tmp_path))]) == 2
    assert "did you mean" in capsys.readouterr().err and not out.exists()


def test_the_script_is_split_from_accels_own_options(tmp_path):
    path = script(tmp_path)
    assert split(["bench", "--ablate", "--", "python", "t.py", "--steps", "9"]) == (
        ["bench", "--ablate"],
        ["python", "t.py", "--steps", "9"],
    )
    assert split(["bench", "--steps", "3", str(path), "--lr", "1"]) == (
        ["bench", "--steps", "3"],
        [sys.executable, str(path), "--lr", "1"],
    )
    assert split(["bench", "quickstart", "--ablate"]) == (["bench", "quickstart", "--ablate"], None)
    assert split(["train", "--", "x"]) == (["train", "--", "x"], None)  # only commands that take a script


def _steps(eng, model, optimizer, n: int) -> None:
    for _ in range(n):
        loss = torch.nn.functional.cross_entropy(model(torch.randn(4, 8)), torch.randint(0, 2, (4,)))
        eng.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def _linear_trial_engine():
    """An engine on the CPU and a linear model with SGD set up through it (its trial, from the environment)."""
    model = torch.nn.Linear(8, 2)
    eng = accel.Engine(device="cpu")
    return eng, *eng.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))


def _agent(eng):
    """The engine's trial (accel.trial.engine_agent), among its core's observers."""
    return next(o.agent for o in eng._core.observers if isinstance(o, Joined))


def _trial_env(monkeypatch, record, **more) -> None:
    settings = {trial_variables.PATH: record, trial_variables.WARMUP: 1, trial_variables.STEPS: 3, **more}
    for name, value in settings.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # the trial's hook is undone with the test
    # as the trial's sitecustomize registers it in a trial's process, undone with the test
    monkeypatch.setattr(process_observers, "FACTORIES", [dispatch.attach])


def test_the_engine_writes_its_trial_after_warmup_and_steps_and_exits_0(tmp_path, monkeypatch):
    record = tmp_path / "trial.json"
    _trial_env(monkeypatch, record, **{trial_variables.WARMUP: 2})
    eng, model, optimizer = _linear_trial_engine()
    with pytest.raises(SystemExit) as stopped:
        _steps(eng, model, optimizer, 10)
    assert stopped.value.code == 0 and eng.steps == 5  # 2 warm-up + 3 timed optimizer steps, no more
    _agent(eng).done = True  # its at-exit check belongs to a real process's end
    trial = Trial.model_validate_json(record.read_text())
    assert trial.steps == 3 and len(trial.step_times_s) == 3 and len(trial.step_losses) == 5
    assert trial.samples_per_s == pytest.approx(12 / sum(trial.step_times_s))  # 4 samples a step
    assert trial.flops_per_step > 0 and trial.flop_per_s > 0 and trial.lint is not None  # as a recipe's trial
    assert trial.warmup_s >= trial.first_step_s > 0 and trial.final_loss == pytest.approx(
        sum(trial.step_losses[2:]) / 3
    )


@pytest.mark.slow
def test_a_one_off_first_timed_step_is_start_up_and_a_window_holds_its_seconds_of_steady_steps(tmp_path, monkeypatch):
    record = tmp_path / "trial.json"
    _trial_env(monkeypatch, record, **{trial_variables.WINDOW: 0.05})
    eng, model, optimizer = _linear_trial_engine()
    _steps(eng, model, optimizer, 1)  # the warm-up step
    hook = model.register_forward_pre_hook(lambda *_: time.sleep(2.0))  # the first timed step: a one-off cost
    _steps(eng, model, optimizer, 1)
    hook.remove()
    with pytest.raises(SystemExit):
        _steps(eng, model, optimizer, 10**5)
    _agent(eng).done = True
    trial = Trial.model_validate_json(record.read_text())
    assert trial.warmup_cut == 1 and trial.warmup_s >= 2.0 and max(trial.step_times_s) < 1.0  # a stall under load: <1 s
    assert sum(trial.step_times_s) >= 0.05 and trial.steps == len(trial.step_losses) - 2  # past the 3 asked
    assert trial.final_loss == pytest.approx(sum(trial.step_losses[1:4]) / 3)  # after the planned steps


def test_the_machines_load_is_read_over_the_timed_steps_only(tmp_path, monkeypatch):
    # a warm-up step of 1 s (a compilation): a neighbour then does not touch the timed steps, so it is not counted
    record = tmp_path / "trial.json"
    _trial_env(monkeypatch, record, **{trial_variables.WARMUP: 2})
    eng, model, optimizer = _linear_trial_engine()
    _steps(eng, model, optimizer, 1)
    time.sleep(1.0)
    with pytest.raises(SystemExit):
        _steps(eng, model, optimizer, 10)
    _agent(eng).done = True
    trial = Trial.model_validate_json(record.read_text())
    assert sum(trial.step_times_s) <= trial.load["wall_s"] < sum(trial.step_times_s) + 0.5 < trial.warmup_s


def test_the_warm_up_ends_by_stopping_the_loops_compile_workers_untimed(tmp_path, monkeypatch):
    """The loop's own torch.compile starts inductor's pool, which halved a compiled model's throughput on a GPU
    host while it started: the warm-up's end stops it and waits, as warm-up."""
    import accel.trial.engine_agent as engine_trial

    stopped = []
    monkeypatch.setattr(engine_trial, "stop_compile_workers", lambda: (stopped.append(1), time.sleep(1.0)))
    record = tmp_path / "trial.json"
    _trial_env(monkeypatch, record, **{trial_variables.WARMUP: 2})
    eng, model, optimizer = _linear_trial_engine()
    with pytest.raises(SystemExit):
        _steps(eng, model, optimizer, 10)
    _agent(eng).done = True
    trial = Trial.model_validate_json(record.read_text())
    assert stopped == [1] and trial.warmup_s >= 1.0 and sum(trial.step_times_s) < 1.0


@pytest.mark.parametrize("sync", ["step", "window"])
def test_a_window_trial_of_a_script_synchronises_after_the_warmup_and_the_last_step_only(tmp_path, monkeypatch, sync):
    record, callers = tmp_path / "trial.json", syncs_by_caller(monkeypatch)
    _trial_env(monkeypatch, record, **{trial_variables.WARMUP: 2, trial_variables.SYNC: sync})
    eng, model, optimizer = _linear_trial_engine()
    with pytest.raises(SystemExit):
        _steps(eng, model, optimizer, 10)
    _agent(eng).done = True
    assert callers.count("stepped") == (5 if sync == "step" else 3)  # 2 warm-up, 3 timed: the warm-up's and the last
    trial = Trial.model_validate_json(record.read_text())
    assert trial.samples_per_s == pytest.approx(12 / sum(trial.step_times_s))  # the marks are contiguous


def test_the_engine_times_the_target_its_script_logs(tmp_path, monkeypatch):
    record = tmp_path / "trial.json"
    _trial_env(monkeypatch, record, **{trial_variables.TARGET: "val_loss=0.5"})
    eng, model, optimizer = _linear_trial_engine()
    with pytest.raises(SystemExit):
        for i in range(10):
            _steps(eng, model, optimizer, 1)
            eng.log({"val_loss": 1.0 - 0.3 * i, "val_accuracy": 0.5})  # after steps 1, 2, 3: 1.0, 0.7, 0.4
    _agent(eng).done = True
    trial = Trial.model_validate_json(record.read_text())
    assert [e["step"] for e in trial.target_evals] == [1, 2, 3] and trial.error is None
    assert trial.time_to_target_s == trial.target_evals[2]["wall_s"] > 0


def test_the_engine_stops_a_trial_that_cannot_reach_its_target_by_its_deadline(tmp_path, monkeypatch):
    record, stop = tmp_path / "trial.json", {trial_variables.STOP: "1", trial_variables.STEPS: 0}
    _trial_env(monkeypatch, record, **{trial_variables.TARGET: "val_loss=0.5", trial_variables.DEADLINE: 600, **stop})
    eng, model, optimizer = _linear_trial_engine()
    with pytest.raises(SystemExit) as ended:
        for _ in range(10):
            _steps(eng, model, optimizer, 1)
            eng.log({"val_loss": 1.0})  # flat: it never moves toward the target; read from the fourth reading
    _agent(eng).done = True
    trial = Trial.model_validate_json(record.read_text())
    assert ended.value.code == 0 and eng.steps == 4 and trial.error is None and trial.time_to_target_s is None
    assert "it has not moved toward val_loss<=0.5 lately" in trial.pruned and 0 < trial.pruned_saved_s < 600


def test_a_target_the_script_never_logs_is_said(tmp_path, monkeypatch):
    record = tmp_path / "trial.json"
    _trial_env(monkeypatch, record, **{trial_variables.TARGET: "val_loss=0.5"})
    eng, model, optimizer = _linear_trial_engine()
    with pytest.raises(SystemExit):
        _steps(eng, model, optimizer, 10)
    _agent(eng).done = True
    trial = Trial.model_validate_json(record.read_text())
    assert trial.unlogged_metric == "val_loss" and trial.error.startswith(
        "the script logged no `val_loss` through eng.log in its 4 optimizer steps (it logged nothing): log it after "
        "an evaluation, `eng.log({'val_loss': value})`"
    )


@pytest.mark.slow
def test_a_target_the_script_never_logs_stops_the_bench_at_its_first_trial(tmp_path, capsys):
    out = tmp_path / "bench"
    path = script(tmp_path, text=LOOP.format(crash=False).replace('{"val_loss"', '{"loss"'))
    argv = ["bench", "--vary", "speedups.amp.enabled=false,true", *SHORT, "--target", "val_loss=0.1"]
    assert main([*argv, "--out", str(out), "--", sys.executable, str(path)]) == 2
    said = capsys.readouterr().err
    assert "error: the script logged no `val_loss` through eng.log in its 4 optimizer steps (it logged `loss`)" in said
    assert "`eng.log({'val_loss': value})`" in said and "The remaining 3 trial(s) would fail the same way" in said
    assert len(list((out / "trials").glob("*.json"))) == 1  # one trial ran, not every trial of every variant
    assert report(out)["stopped"] and "**Stopped.** the script logged no `val_loss`" in (out / "report.md").read_text()


def test_a_compiled_steps_trial_counts_optimizer_steps_and_whole_losses(tmp_path, monkeypatch):
    record = tmp_path / "trial.json"
    _trial_env(monkeypatch, record)
    model = torch.nn.Linear(8, 2)
    eng = accel.Engine(device="cpu", grad_accum=2)
    model, optimizer = eng.setup(model, torch.optim.SGD(model.parameters(), lr=0.0))  # lr 0: the same loss
    step = eng.compile_step(lambda x: model(x).sum())
    x = torch.ones(4, 8)
    with pytest.raises(SystemExit):
        for _ in range(20):
            loss = step(x)
    _agent(eng).done = True
    trial = Trial.model_validate_json(record.read_text())
    assert eng.steps == 4 and trial.batch_size == 4 and trial.grad_accum == 2  # 1 warm-up + 3, two micro-batches each
    assert trial.step_losses == pytest.approx([float(loss)] * 4)  # a micro-batch's mean, not the sum of two


def test_a_loop_whose_backward_bypasses_the_engine_is_timed_without_a_loss(tmp_path, monkeypatch):
    record = tmp_path / "trial.json"
    _trial_env(monkeypatch, record)
    eng, model, optimizer = _linear_trial_engine()
    with pytest.raises(SystemExit):
        for _ in range(10):
            model(torch.randn(4, 8)).sum().backward()  # fp32: the loop's own backward is allowed
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    _agent(eng).done = True
    trial = Trial.model_validate_json(record.read_text())
    assert trial.ok and trial.final_loss is None and trial.step_losses is None  # unknown, not diverged


def test_without_the_variable_the_engine_holds_no_trial(monkeypatch):
    monkeypatch.delenv(trial_variables.PATH, raising=False)
    assert not any(isinstance(o, Joined) for o in accel.Engine(device="cpu")._core.observers)


@pytest.mark.slow
def test_a_scripts_variant_the_conflict_rule_refuses_is_known_before_any_trial(tmp_path):
    from accel.bench.script import plan_script

    command = [sys.executable, str(script(tmp_path))]
    plan = plan_script(command, ["speedups.compile.enabled=true"], False, ["speedups.jit.enabled=false,true"])
    assert list(plan.refused) == ["speedups.jit.enabled=true"]
    assert "cannot be stacked" in plan.refused["speedups.jit.enabled=true"]


def test_a_trial_writes_nothing_where_the_scripts_own_run_keeps_its_records(tmp_path, monkeypatch):
    _trial_env(monkeypatch, tmp_path / "trial.json")
    own, checkpoint = tmp_path / "run", tmp_path / "ckpt.pt"
    model = torch.nn.Linear(8, 2)
    eng = accel.Engine(device="cpu", out=own)
    model, optimizer = eng.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(SystemExit):
        for _ in range(10):
            _steps(eng, model, optimizer, 1)
            eng.log({"val_loss": 1.0})
            eng.save(checkpoint, {"model": model})
            eng.load(checkpoint, {"model": model})
    _agent(eng).done = True
    eng.close()
    assert not own.exists()  # no metrics.jsonl, tb/ or summary.json of the trial's in the real run's folder


def test_a_scripts_engines_are_one_trial_whose_clock_is_the_first_to_step(tmp_path, monkeypatch):
    record = tmp_path / "trial.json"
    _trial_env(monkeypatch, record)
    first, second = torch.nn.Linear(8, 2), torch.nn.Linear(8, 2)
    eng_a, eng_b = accel.Engine(device="cpu"), accel.Engine(device="cpu")
    first, opt_a = eng_a.setup(first, torch.optim.SGD(first.parameters(), lr=0.1))
    second, opt_b = eng_b.setup(second, torch.optim.SGD(second.parameters(), lr=0.1))
    assert _agent(eng_a) is _agent(eng_b)
    with pytest.raises(SystemExit):
        for _ in range(10):
            _steps(eng_b, second, opt_b, 1)  # the second engine steps first: the clock
            eng_a.backward(first(torch.randn(2, 8)).pow(2).sum() + 1000.0)  # another batch size, another loss
            opt_a.step()
            opt_a.zero_grad(set_to_none=True)
    _agent(eng_a).done = True
    trial = Trial.model_validate_json(record.read_text())
    assert trial.error is None and eng_b.steps == 4 and eng_a.steps == 3  # 1 warm-up + 3: the clock's steps
    assert trial.samples_per_s == pytest.approx(12 / sum(trial.step_times_s))  # the clock's 4 samples a step
    assert len(trial.step_losses) == 4 and max(trial.step_losses) < 10  # the clock's cross entropy


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_two_engine_script_is_benched_as_one_training_and_its_own_records_stay_as_they_were(tmp_path):
    own = tmp_path / "run"
    subprocess.run([sys.executable, str(GAN), "--steps", "30", "--out", str(own)], check=True, capture_output=True)
    before = _files(own)
    assert {"metrics.jsonl", "summary.json"} <= before.keys()
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "arg:--batch=8,16", "--steps", "3", "--warmup", "1", "--trials", "1"]
    assert main([*argv, "--out", str(out), "--", sys.executable, str(GAN), "--out", str(own)]) == 0
    for variant, batch in zip(report(out)["variants"], (8, 16)):
        (trial,) = variant["trials"]
        assert "error" not in trial and len(trial["step_times_s"]) == 3 and len(trial["step_losses"]) == 4
        # the clock's (the discriminator's) forwards in its first step: the real and the generated batch
        assert trial["batch_size"] == 2 * batch
        assert variant["final_loss"] > 0
    assert _files(own) == before  # byte for byte: the trials wrote nothing there
