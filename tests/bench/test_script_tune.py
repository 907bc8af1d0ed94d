"""`accel tune -- python train.py`: tune's stages on a user's own script (accel/bench/tune/script.py), each trial a
fresh process of it. The search on simulated measurements of the real examples, the time objective once for real
on the GPT loop, and the knobs a script's options make."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from accel.bench import runner
from accel.bench.records import Trial
from accel.bench.trial_process import TrialSettings
from accel.bench.tune import Knob, Objective, levers, tune
from accel.bench.tune.script import (
    ScriptSubject,
    UnchangedScript,
    options_of,
    run_line,
    speed_knobs,
    time_knobs,
    write_script_fragment,
)
from accel.cli import main
from accel.errors import AccelError
from accel.optimizers.traits import OptimizerTraits
from accel.speedups import RunFacts
from conftest import ROOT

FOREACH = {"impl": "foreach", "enabled": True}
RESNET = [sys.executable, str(ROOT / "examples" / "resnet_loop.py"), "--size", "8", "--batch", "4", "--samples", "32"]


def simulated(final_slower: bool, seen: list):
    """A run_trials stand-in over the script's launches: amp off is 2x faster in its stage; in the final check the
    tuned configuration measures 2x slower than the script as given when `final_slower`."""

    def run_trials(jobs, out, settings, console=None, skip=None):
        results = []
        for trial, name, launch in jobs:
            seen.append((out.name, name, launch.accel_set()))
            off = 'speedups.amp={"enabled": false}' in launch.accel_set()  # as JSON, read back as YAML
            sps = 100.0 if off else 50.0
            if out.name == "final":
                sps = 50.0 if (name == "tuned") == final_slower else 100.0
            sps *= 1 + 0.001 * trial
            results.append(Trial(variant=name, trial=trial, samples_per_s=sps, median_step_samples_per_s=sps))
        return results

    return run_trials


@pytest.fixture(scope="module")
def resnet():
    """The ResNet loop as tune sees it: its engine was given amp (bf16) and channels_last (one real probe)."""
    return ScriptSubject.probed(RESNET, [])


@pytest.mark.slow
@pytest.mark.parametrize("final_slower", [True, False])
def test_tune_on_the_resnet_loop_never_writes_a_configuration_slower_than_the_script(resnet, tmp_path, final_slower):
    assert set(resnet.engine["speedups"]) == {"amp", "channels_last"}
    seen: list = []
    off_first = {"speedups.amp": {"enabled": False}}  # amp measures slower than off, so the final check runs
    knobs = [Knob("speedups.amp", [{"enabled": False}, resnet.engine["speedups"]["amp"]], speedup=True)]
    fake = simulated(final_slower, seen)
    result = tune(resnet, knobs, tmp_path / "work", TrialSettings(3, 1), trials=2, final_check=True, run_trials=fake)
    assert [name for where, name, _ in seen if where == "final"] == ["script as given", "tuned"] * 2
    given = [s for where, name, s in seen if name == "script as given"]
    assert given == ["", ""]  # the script as given runs with no ACCEL_SET of tune's
    assert result.final.given == "script as given"  # the table's final row: "tuned vs script as given"
    path, line = write_script_fragment(result, resnet, tmp_path / "tuned.yaml", ["Written by `accel tune` test"])
    written = yaml.safe_load(path.read_text())["speedups"]
    if final_slower:  # measured slower together: the script's own speed-ups, and the line runs it unchanged
        assert result.final.reverted == off_first and result.chosen == {}
        assert written == resnet.engine["speedups"]
        assert "Slower than the script as given, so nothing is changed" in path.read_text()
    else:
        assert result.chosen == off_first and not result.final.slower
        assert set(written) == {"channels_last"}  # amp off: absent from the section that replaces the script's
    assert line == f"ACCEL_SPEEDUPS={path} {' '.join(RESNET)}"
    assert f"#   {line}\n" in path.read_text()


def test_a_scripts_options_make_the_time_knobs(tmp_path):
    command = ["python", "train.py", "--lr=3e-3", "--batch", "16", "--bf16", "--shift", "-1"]
    assert options_of(command) == {"--lr": 3e-3, "--batch": 16, "--shift": -1}
    subject = ScriptSubject(command, [], {"speedups": {}, "device": "cpu", "strategy": None, "optimizer": None})
    optimizer, lr, batch = time_knobs(subject, "--lr", "--batch", None, [])
    assert (optimizer.key, optimizer.values) == ("optimizer", ["muon"])
    assert (lr.key, lr.values) == ("arg:--lr", [0.0015, 0.006])
    assert (batch.key, batch.values, batch.bounded) == ("arg:--batch", [8, 16, 32], True)
    plain = subject.plain()
    assert batch.couple(64, {}, plain) == {"arg:--lr": 0.006}  # 4x the batch: 2x the rate (square root)
    assert batch.couple(64, {"arg:--lr": 0.006}, plain) == {"arg:--lr": 0.012}  # from the rate chosen so far
    chosen = {"optimizer": "muon", "arg:--lr": 0.006, "arg:--batch": 32}
    assert run_line(subject, chosen, tmp_path / "t.yaml") == (
        f"ACCEL_SPEEDUPS={tmp_path / 't.yaml'} ACCEL_SET=optimizer=muon python train.py --lr=0.006 --batch 32 "
        "--bf16 --shift -1"
    )
    assert subject.config_key({"optimizer": None}) == subject.config_key({})  # as given, however said
    with pytest.raises(AccelError, match="give the script's --steps a positive value on its command line"):
        time_knobs(subject, "--steps", None, None, [])
    with pytest.raises(AccelError, match="with its dashes"):
        time_knobs(subject, "lr", None, None, [])


def test_tune_refuses_what_a_script_cannot_take_before_running_it(tmp_path, capsys):
    never_run = tmp_path / "never_run.py"
    never_run.write_text("raise SystemExit('this script must not run')\n")  # there, so only the options are refused
    script = ["--", sys.executable, str(never_run)]
    for options, said in [
        (["--workers", "0,1"], "--workers, --threads and --eval-batches set a recipe's keys"),
        (["--lr-arg=--lr"], "need --objective time"),
    ]:
        assert main(["tune", *options, "--work", str(tmp_path / "w"), *script]) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_tune_for_time_on_the_gpt_loop_for_real(tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "tuned.yaml"
    gpt = [sys.executable, str(ROOT / "examples" / "gpt_loop.py"), "--data", str(tmp_path / "data")]
    gpt += ["--steps", "6", "--batch", "4", "--accum", "1", "--block", "16", "--eval-every", "2", "--lr", "3e-3"]
    argv = ["tune", "--objective", "time", "--trials", "2", "--timeout", "300", "--work", str(work), "--out", str(out)]
    assert main([*argv, "--", *gpt]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-2] == str(out)
    got = json.loads((work / "tune.json").read_text())
    assert got["target"].startswith("val_loss<=")  # the script's own end-of-run loss, read from its curves
    # its 6 steps are fewer than the speed-up stages' short trials take (3 + 10): the speed-ups stay as given, and
    # the learning knobs are searched all the same
    (speedups,) = [r for r in got["rows"] if r["knob"] == "speed-ups"]
    assert speedups["note"].startswith("speed-ups not searched: the script as given failed their short throughput")
    assert "ended after 6 of the 13 optimizer steps" in speedups["note"]
    rows = {r["value"]: r for r in got["rows"] if r["knob"] == "optimizer"}
    assert rows[None]["target_reached"] == 2 and rows[None]["time_to_target_s"] > 0
    assert rows["muon"]["target_reached"] is not None  # measured beside it (reached or not)
    final = got["final"]
    if got["chosen"].get("optimizer") == "muon":  # kept: the final check measured it sooner, in every trial
        assert final["time_ratio"]["median"] < 1 and final["reached"]["tuned"] == "2/2"
        assert "ACCEL_SET=optimizer=muon" in printed[-1]
    else:  # the script as given: run as it was
        assert printed[-1] == f"ACCEL_SPEEDUPS={out} {' '.join(gpt)}"
    text = out.read_text()
    assert text.startswith("# Written by `accel tune --objective time") and yaml.safe_load(text) == {"speedups": {}}


@pytest.mark.slow
def test_the_time_objective_tries_a_speedup_on_the_gpt_loop_for_real(tmp_path):
    """A speed-up stage of short throughput trials, then the learning rate to the script's own end-of-run loss on
    top of what it chose, in real processes of the GPT example (which of them wins is the machine's to say)."""
    gpt = [sys.executable, str(ROOT / "examples" / "gpt_loop.py"), "--data", str(tmp_path / "data")]
    gpt += ["--steps", "16", "--batch", "4", "--accum", "1", "--block", "16", "--eval-every", "4", "--lr", "3e-3"]
    subject = ScriptSubject.probed(gpt, [], 300)
    optim = Knob("speedups.optim", [{"enabled": False}, FOREACH], speedup=True, labels=["off", "impl=foreach"])
    seen: list = []

    def run_trials(jobs, out, settings, console=None, skip=None):
        seen.extend((out.name, launch.accel_set(), settings.steps) for _, _, launch in jobs)
        return runner.run_trials(jobs, out, settings, console, skip=skip)

    result = tune(
        subject,
        [optim, Knob("arg:--lr", [6e-3])],
        tmp_path / "work",
        TrialSettings(0, 1, 300, evaluate=False),  # each trial the script's own run
        trials=2,
        final_check=True,
        run_trials=run_trials,
        objective=Objective("time", speed=TrialSettings(5, 2, 300, evaluate=False)),
    )
    trials = {p: json.loads(p.read_text()) for p in (tmp_path / "work").rglob("trials/*.json")}
    by_speed = [t for p, t in trials.items() if p.parts[-3] == "0-speedups.optim"]
    # 5 timed steps, less a leading one-off moved into the warm-up (a stall under load)
    timed = [t["steps"] + (t.get("warmup_cut") or 0) for t in by_speed]
    assert len(by_speed) == 4 and timed == [5] * 4 and not any("target_evals" in t for t in by_speed)
    assert {steps for where, _, steps in seen if where == "0-speedups.optim"} == {5}
    assert result.target.startswith("val_loss<=")  # read from the script as given, in the first run to the target
    assert all(t["target_evals"] for p, t in trials.items() if p.parts[-3] == "1-arg:--lr")
    # measurably faster, and no later to the target (what the stages chose, before a slower final check undoes it)
    reverted = result.final.reverted if result.final is not None else None
    foreach = (result.chosen if reverted is None else reverted).get("speedups.optim") == FOREACH
    assert foreach == any(r.knob == "speed-ups" and r.note == "chosen" for r in result.rows)
    lr_sets = {accel_set for where, accel_set, _ in seen if where == "1-arg:--lr"}
    assert all(("foreach" in accel_set) == foreach for accel_set in lr_sets)  # the learning rate on top of it
    if result.final is not None and not result.final.slower:
        assert dict(levers.shares(result))["together"] == result.final.time_ratio


@pytest.mark.slow
def test_the_speed_knobs_start_from_the_scripts_speedups_and_launch_as_measured(resnet):
    from accel.bench.script import resolved
    from accel.bench.tune.script import speed_knobs

    knobs = {k.key: k for k in speed_knobs(resnet, True, None, None, [])}
    assert {"speedups.amp", "speedups.channels_last", "speedups.compile"} <= set(knobs)
    for knob in knobs.values():  # each candidate (a whole section, None values too) reaches the engine unchanged
        for value in knob.values[1:]:
            got = resolved(resnet.engine, resnet.launch({knob.key: value}), "v")["speedups"][knob.key.split(".")[1]]
            assert got == got | value


def test_a_scripts_candidate_the_conflict_rule_refuses_is_recorded_refused_without_a_trial(tmp_path):
    rmsprop = OptimizerTraits("RMSprop", foreach=True, capturable=True, known_fused=False)  # as the probe read it
    engine = {"speedups": {}, "device": "cpu", "resolved_device": "cpu", "strategy": None, "optimizer": None}
    subject = ScriptSubject(["python", "train.py"], [], engine | {"run": RunFacts(optimizer=rmsprop).to_data()})
    seen: list = []
    knob = Knob(
        "speedups.optim",
        [{"enabled": False}, {"impl": "fused", "enabled": True}, {"impl": "foreach", "enabled": True}],
        speedup=True,
        labels=["off", "impl=fused", "impl=foreach"],
    )
    result = tune(subject, [knob], tmp_path, TrialSettings(3, 1), trials=2, run_trials=simulated(False, seen))
    notes = {r.label: r.note for r in result.rows}
    assert notes["impl=fused"].startswith("refused, not run: `speedups.optim`: RMSprop has no fused kernel")
    assert sorted({name for _, name, _ in seen}) == ["speedups.optim=impl=foreach", "speedups.optim=off"]


def test_muon_in_place_of_a_scripts_optimizer_is_refused_beside_a_fused_kernel_chosen_before_it(tmp_path, caplog):
    import logging

    from accel.bench.refused import script_refusals
    from accel.bench.script import resolved

    adamw = OptimizerTraits("AdamW", foreach=True, capturable=True, known_fused=True)
    engine = {"speedups": {}, "device": "cpu", "resolved_device": "cpu", "strategy": None, "optimizer": None}
    subject = ScriptSubject(["python", "train.py"], [], engine | {"run": RunFacts(optimizer=adamw).to_data()})
    fused = {"speedups.optim": {"impl": "fused", "enabled": True}}
    assert subject.refusals(fused) == []  # the script's own AdamW has the kernel
    with caplog.at_level(logging.INFO, logger="accel"):
        (said,) = subject.refusals({**fused, "optimizer": "muon"})
    assert "muon" not in caplog.text  # the stand-in Muon's notes are not the run's
    assert said.startswith("`speedups.optim`: MuonWithAdamW has no fused kernel for its parameters here")
    assert script_refusals(subject.engine, resolved(subject.engine, subject.launch({"optimizer": "muon"}), "v")) == []


def test_muon_after_a_fused_kernel_was_chosen_carries_impl_auto_and_is_not_refused():
    from accel.bench.tune.search import _variant

    adamw = OptimizerTraits("AdamW", foreach=True, capturable=True, known_fused=True)
    engine = {"speedups": {}, "device": "cpu", "resolved_device": "cpu", "strategy": None, "optimizer": None}
    subject = ScriptSubject(["python", "train.py"], [], engine | {"run": RunFacts(optimizer=adamw).to_data()})
    (muon,) = [k for k in time_knobs(subject, None, None, None, []) if k.key == "optimizer"]
    fused = {"speedups.optim": {"impl": "fused", "enabled": True}}
    variant = _variant(muon, "muon", fused, subject.plain())
    assert variant.overrides == {"optimizer": "muon", "speedups.optim": {"impl": "auto", "enabled": True}}
    assert subject.refusals(variant.overrides) == []  # the fused kernel where it works: the AdamW half
    assert _variant(muon, "muon", {}, subject.plain()).overrides == {"optimizer": "muon"}  # nothing fused: as is
    assert _variant(muon, None, fused, subject.plain()).overrides == {**fused, "optimizer": None}  # the reference


# --- a script without an engine: its Trainer's flags and its own options ------------------------------------------

HF_GIVEN = {
    "engine": False,
    "framework": "hf",
    "command_line": True,
    "resolved_device": "cpu",
    "flags": {
        "bf16": False,
        "fp16": False,
        "tf32": None,
        "torch_compile": False,
        "optim": "adamw_torch_fused",
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": True,
        "gradient_checkpointing": False,
        "use_liger_kernel": False,
        "use_cpu": False,
    },
}


def test_a_trainer_scripts_own_flags_make_the_speed_knobs_and_its_command_is_the_result(tmp_path):
    subject = UnchangedScript(["python", "train.py", "--per_device_train_batch_size", "8"], [], HF_GIVEN)
    knobs = {k.key: k for k in speed_knobs(subject, True, "--per_device_train_batch_size", None, [])}
    assert knobs["arg:--bf16"].values == [True] and knobs["arg:--bf16"].guard  # a speed flag keeps the loss
    assert knobs["arg:--bf16"].couple(True, {}, subject.plain()) == {"arg:--use_cpu": True}  # the Trainer's rule
    assert knobs["arg:--optim"].values == ["adamw_torch"] and knobs["arg:--dataloader_pin_memory"].values == [False]
    assert not {"arg:--fp16", "arg:--tf32", "arg:--use_liger_kernel"} & set(knobs)  # CUDA or a package: skipped
    assert knobs["arg:--per_device_train_batch_size"].values == [4, 8, 16, 32]
    assert subject.config_key({"arg:--bf16": False, "arg:--optim": "adamw_torch_fused"}) == subject.config_key({})
    chosen = {"arg:--bf16": True, "arg:--use_cpu": True, "arg:--per_device_train_batch_size": 16}
    assert run_line(subject, chosen, tmp_path / "t.yaml") == (
        "python train.py --per_device_train_batch_size 16 --bf16=True --use_cpu=True"
    )
    with pytest.raises(AccelError, match="an accel.Engine setting, and `python train.py"):
        speed_knobs(subject, True, None, None, ["speedups.amp.enabled=true"])


@pytest.mark.slow
def test_tune_of_an_unchanged_lightning_script_writes_the_command_to_run(tmp_path, capsys):
    work = tmp_path / "work"
    command = [
        sys.executable,
        str(ROOT / "examples" / "lightning_cli.py"),
        "fit",
        "--trainer.default_root_dir",
        str(tmp_path / "runs"),
        "--trainer.enable_progress_bar",
        "false",
    ]
    argv = ["tune", "--steps", "2", "--warmup", "1", "--trials", "1", "--work", str(work), "--", *command]
    assert main(argv) == 0
    written = yaml.safe_load((work / "tuned.yaml").read_text())
    assert written == {"command": " ".join(command)}  # one trial a value gives no verdict: the script as given
    stages = json.loads((work / "tune.json").read_text())["rows"]
    assert {row["knob"] for row in stages} >= {"arg:--trainer.precision"}
    assert not (tmp_path / "runs").exists()
