"""`accel train` as a user runs it: the run directory contract, bad input, and resuming after SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import torch
import yaml

from accel.cli import main
from accel.runs.records import read_metrics, read_summary
from conftest import ROOT, finish, wait_for_first_checkpoint


def _fails_cleanly(capsys, *argv: str) -> str:
    """Exit code 2, one message, no traceback."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def test_train_writes_the_run_directory_contract(tiny, write_recipe, tmp_path, capsys):
    out = tmp_path / "run"
    tiny["log"]["tensorboard"] = True
    assert main(["train", str(write_recipe(tiny)), "--out", str(out), "--set", "train.epochs=2"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    for name in ("recipe.yaml", "env.json", "metrics.jsonl", "summary.json", "checkpoints/last.pt"):
        assert (out / name).is_file(), name
    assert list((out / "tb").glob("events.out.tfevents.*"))
    assert yaml.safe_load((out / "recipe.yaml").read_text())["train"]["epochs"] == 2
    summary = read_summary(out / "summary.json")
    assert summary.status == "completed" and summary.epochs == 2
    written = json.loads((out / "summary.json").read_text())  # DESIGN.md's fields, for users' scripts
    assert {"status", "metrics", "samples_per_s", "wall_s", "steps", "epochs", "device"} <= set(written)
    assert {record.kind for record in read_metrics(out / "metrics.jsonl")} == {"step", "epoch"}
    assert json.loads((out / "env.json").read_text())["torch"]


def test_recipes_lists_the_shipped_recipes(capsys):
    assert main(["recipes"]) == 0
    assert "quickstart " in capsys.readouterr().out


def test_missing_recipe(capsys, tmp_path):
    assert "Recipe file not found" in _fails_cleanly(capsys, "train", str(tmp_path / "nope.yaml"))


def test_fsdp_with_a_speedup_it_cannot_shard_fails_before_any_process_starts(capsys, tiny, write_recipe):
    tiny["speedups"] = {"channels_last": {}}
    err = _fails_cleanly(capsys, "train", str(write_recipe(tiny)), "--nproc", "2", "--set", "strategy=fsdp")
    assert "`speedups.channels_last`" in err and "strategy: ddp" in err


def test_misspelt_key(capsys, tiny, write_recipe):
    tiny["optim"]["lrr"] = 0.1
    err = _fails_cleanly(capsys, "train", str(write_recipe(tiny)))
    assert "`optim.lrr`" in err and "did you mean `lr`?" in err and "recipe.yaml, line" in err


@pytest.mark.parametrize("name, listed", [("resnet", "small_cnn"), ("torchvision:resnet19", "resnet18")])
def test_unknown_model_lists_the_valid_ones(capsys, tiny, write_recipe, name, listed):
    tiny["model"]["name"] = name
    err = _fails_cleanly(capsys, "train", str(write_recipe(tiny)))
    assert "Unknown" in err and listed in err


def test_cifar10_root_missing_says_where_it_looked(capsys, tiny, write_recipe, tmp_path):
    tiny["data"]["dataset"] = {"name": "cifar10", "root": str(tmp_path / "cifar")}
    err = _fails_cleanly(capsys, "train", str(write_recipe(tiny)))
    assert str(tmp_path / "cifar") in err and "cifar-10-batches-py" in err


def test_imagefolder_root_missing_says_what_layout_it_expects(capsys, tiny, write_recipe, tmp_path):
    tiny["data"]["dataset"] = {"name": "imagefolder", "root": str(tmp_path / "images")}
    err = _fails_cleanly(capsys, "train", str(write_recipe(tiny)))
    assert str(tmp_path / "images") in err and "class" in err


def test_resume_without_a_checkpoint(capsys, tiny, write_recipe, tmp_path):
    err = _fails_cleanly(capsys, "train", str(write_recipe(tiny)), "--out", str(tmp_path / "empty"), "--resume")
    assert "no checkpoint" in err.lower()


def test_resume_with_a_checkpoint_of_another_model(capsys, tiny, write_recipe, tmp_path):
    out = str(tmp_path / "run")
    assert main(["train", str(write_recipe(tiny)), "--out", out]) == 0
    capsys.readouterr()
    tiny["model"]["args"]["width"] = 8
    err = _fails_cleanly(capsys, "train", str(write_recipe(tiny)), "--out", out, "--resume", "--set", "train.epochs=3")
    assert "different model" in err


def _train(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "accel.cli", "train", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path):
    recipe = "quickstart"
    fast = ["--set", "train.epochs=3", "--set", "log.tensorboard=false", "--set", "model.args={width: 16}"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    reference = _train(recipe, "--out", str(whole), *fast)
    victim = _train(recipe, "--out", str(killed), *fast)
    wait_for_first_checkpoint(killed, victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert not (killed / "summary.json").exists()  # killed: no chance to write anything more
    resumed = _train(recipe, "--out", str(killed), "--resume", *fast)
    _, err = finish(resumed)
    assert resumed.returncode == 0, err
    _, err = finish(reference)
    assert reference.returncode == 0, err
    a = read_summary(whole / "summary.json")
    b = read_summary(killed / "summary.json")
    assert a.metrics == b.metrics and a.steps == b.steps == b.epochs * 31


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--help"], ["recipes"], ["train", "--help"], ["bench", "--help"]])
def test_quick_commands_answer_without_importing_torch(argv):
    """What makes them answer in well under a second on 2 cores: torch alone takes seconds to import there
    (the timings: python benchmarks/time_cli.py). `accel speedups` reads the registry, so it imports torch."""
    probe = (
        "import sys\nfrom accel.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print('torch imported' if 'torch' in sys.modules else 'torch not imported', file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=60)
    assert done.stderr.strip().endswith("torch not imported"), done.stderr


@pytest.mark.parametrize("command", ["train", "bench", "tune", "profile"])
def test_help_says_a_recipe_is_a_file_or_a_shipped_name(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    said = " ".join(capsys.readouterr().out.split())  # as argparse wraps it
    assert "a recipe: its YAML file or a shipped recipe's name" in said


def test_accel_speedups_lists_the_registry_with_what_runs_here(capsys):
    from accel.registry import SPEEDUPS

    assert main(["speedups"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert sorted(lines) == SPEEDUPS.names()
    assert SPEEDUPS.get("threads").__doc__.strip().splitlines()[0] in lines["threads"]
    assert lines["threads"].endswith("[available]")  # runs anywhere
    # a description that wraps is said to its sentence's end: "no schedule" alone would read as none allowed
    assert "its learning rates as tensors: no schedule recompiles it.  [" in lines["compiled_optimizer"]
    if not torch.cuda.is_available():
        assert "[unavailable here: float8 matmuls need a CUDA GPU" in lines["float8"]
