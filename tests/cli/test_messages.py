"""Mistakes users make get a message that names the file or the recipe key, never a traceback (exit code 2)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from accel.cli import main


def refused(capsys, *argv: str) -> str:
    """Exit code 2, one message, no traceback."""
    assert main(list(map(str, argv))) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--ablate", "--", "python", "missing.py"],
        ["bench", "--ablate", "missing.py"],
        ["tune", "missing.py"],
        ["profile", "--", "python", "-u", "missing.py", "--lr", "0.1"],
        ["run", "--", "python", "missing.py"],
    ],
)
def test_a_missing_script_is_named_a_script_not_a_recipe(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = refused(capsys, *argv)
    assert err == f"error: script not found: missing.py (looked in {tmp_path}).\n"
    assert "Recipe file not found: missing.yaml" in refused(capsys, "bench", "--ablate", "missing.yaml")


@pytest.fixture
def killed(tiny, write_recipe, tmp_path, capsys):
    """A run directory as a SIGKILLed run leaves it: recipe and checkpoints, no summary. (recipe, run dir)."""
    recipe, out = write_recipe(tiny), tmp_path / "run"
    assert main(["train", str(recipe), "--out", str(out)]) == 0
    (out / "summary.json").unlink()
    capsys.readouterr()
    return recipe, out


def test_a_plain_state_dict_as_last_pt_is_named_as_such(killed, capsys):
    recipe, out = killed
    last = out / "checkpoints" / "last.pt"
    model = torch.load(last, weights_only=True)["model"]
    torch.save(model, last)
    err = refused(capsys, "train", recipe, "--out", out, "--resume")
    assert (
        f"{last} is not a checkpoint written by accel: it holds {len(model)} tensors by name (a model's "
        "state_dict?), without model, model_signature, optimizer" in err
    )
    assert f"The newest intact checkpoint beside it is {out / 'checkpoints' / 'epoch-002.pt'}" in err


def test_an_unknown_model_argument_names_the_key_the_model_and_its_arguments(tiny, write_recipe, capsys):
    err = refused(capsys, "train", write_recipe(tiny), "--set", "model.args.widht=8")
    assert (
        "model.args.widht: model `small_cnn` takes no argument `widht` (did you mean `width`?). Its arguments: "
        "num_classes, in_channels, width, batch_norm."
    ) in err


def test_an_unknown_torchvision_argument_names_the_key(tiny, write_recipe, capsys):
    pytest.importorskip("torchvision")
    tiny["model"] = {"name": "torchvision:resnet18", "args": {"depth": 3}}
    err = refused(capsys, "train", write_recipe(tiny))
    assert "model.args.depth: torchvision model `resnet18` takes no argument `depth`" in err


def test_a_validation_fraction_that_leaves_no_training_sample_names_the_key(tiny, write_recipe, capsys):
    tiny["data"]["dataset"].update(num_samples=4, val_fraction=0.9)
    err = refused(capsys, "train", write_recipe(tiny))
    assert "data.dataset.val_fraction 0.9 of 4 samples holds out 4 for validation and leaves no training sample" in err


def _token_recipe(path, **dataset) -> dict:
    return {
        "name": "lm",
        "model": {"name": "gpt", "args": {"width": 8, "depth": 1, "heads": 2}},
        "data": {"dataset": {"name": "token_file", "path": str(path), "context": 8, **dataset}, "batch_size": 4},
        "task": "language_model",
        "optim": {"name": "adamw"},
        "train": {"max_steps": 2},
        "device": "cpu",
        "log": {"progress": False, "tensorboard": False},
    }


def test_an_empty_token_file_is_named(write_recipe, tmp_path, capsys):
    empty = tmp_path / "train.bin"
    empty.write_bytes(b"")
    err = refused(capsys, "train", write_recipe(_token_recipe(empty)))
    assert f"token_file: {empty} is empty (0 bytes)" in err


def test_a_token_validation_fraction_that_leaves_no_training_window_names_the_key(write_recipe, tmp_path, capsys):
    tokens = tmp_path / "train.bin"
    np.arange(100, dtype=np.uint16).tofile(tokens)
    err = refused(capsys, "train", write_recipe(_token_recipe(tokens, val_fraction=0.95)))
    assert "data.dataset.val_fraction 0.95 holds out 95 of 100 tokens for validation and leaves 5, too few" in err


def test_a_head_smaller_than_the_vocabulary_is_refused_up_front(write_recipe, tmp_path, capsys):
    tokens = tmp_path / "train.bin"
    np.arange(100, dtype=np.uint16).tofile(tokens)
    recipe = _token_recipe(tokens)
    recipe["model"]["num_classes"] = 10
    err = refused(capsys, "train", write_recipe(recipe))
    assert "model.num_classes is 10, but the data has a vocabulary of 100 tokens (ids 0 to 99)" in err


def test_a_head_smaller_than_the_classes_is_refused_up_front(tiny, write_recipe, capsys):
    tiny["model"]["num_classes"] = 2
    err = refused(capsys, "train", write_recipe(tiny))
    assert (
        "model.num_classes is 2, but the data has 4 classes (labels 0 to 3): set model.num_classes to at least 4" in err
    )


@pytest.mark.parametrize("text", ['{"status": "compl', "[1, 2]"])
def test_a_damaged_summary_is_a_warning_not_a_traceback(tmp_path, caplog, text):
    from accel.export.report import _trained_accuracy
    from accel.runs.rundir import RunDir

    (tmp_path / "summary.json").write_text(text)
    assert _trained_accuracy(SimpleNamespace(run_dir=tmp_path))["accuracy_reported_by_training"] is None
    assert f"{tmp_path / 'summary.json'}" in caplog.text
    with pytest.raises(Exception, match="already holds a run; accel never overwrites one"):
        RunDir(tmp_path).check_new()


@pytest.mark.parametrize(
    "command, flag",
    [("bench", "--out"), ("profile", "--out"), ("tune", "--work"), ("tune", "--out"), ("export", "--out")],
)
def test_an_output_path_under_a_file_is_refused_before_the_work(
    monkeypatch, tiny, write_recipe, tmp_path, capsys, command, flag
):
    import accel.bench.runner
    import accel.bench.tune
    import accel.export.pipeline
    import accel.profile

    def started(*args, **kwargs):
        raise AssertionError("the work started")

    for module, name in [
        (accel.bench.runner, "run_bench"),
        (accel.profile, "profile_recipe"),
        (accel.bench.tune, "tune"),
        (accel.export.pipeline, "load_source"),
    ]:
        monkeypatch.setattr(module, name, started)
    recipe, notes = write_recipe(tiny), tmp_path / "notes.txt"
    notes.write_text("mine")
    argv = {
        "bench": ["bench", recipe, "--vary", "data.batch_size=8,16"],
        "profile": ["profile", recipe],
        "tune": ["tune", recipe, "--batch-sizes", "8,16", "--workers=", "--threads=", "--no-speedups"],
        "export": ["export", tmp_path / "run"],
    }[command]
    if command == "tune":  # the other one of --work and --out goes somewhere writable
        argv += ["--out", tmp_path / "t.yaml"] if flag == "--work" else ["--work", tmp_path / "work"]
    err = refused(capsys, *argv, flag, notes / "x")
    assert f"{flag} {notes / 'x'}: {notes} is a file, not a folder" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "recipe.yaml"] and notes.read_text() == "mine"


@pytest.mark.parametrize(
    "size, dataset, said",
    [
        # 100 tokens held out of 1000: the set is long enough, its validation tail is not
        (
            1000,
            {"context": 128},
            "data.dataset.val_fraction 0.1 holds out the last 100 of 1000 tokens for validation, "
            "too few for one validation window of context 128 plus its target (129 tokens): raise "
            "data.dataset.val_fraction to 0.13 or more, lower data.dataset.context, or set "
            "data.dataset.val_fraction: 0",
        ),
        # no share leaves a window on each side: the fraction is not offered
        (
            200,
            {"context": 128},
            "holds out the last 20 of 200 tokens for validation, too few for one validation "
            "window of context 128 plus its target (129 tokens): lower data.dataset.context",
        ),
        (100, {"context": 128}, "the set holds 100 tokens, too few to fill one window of context 128 plus its target"),
    ],
)
def test_a_token_validation_tail_shorter_than_a_window_names_the_split(
    write_recipe, tmp_path, capsys, size, dataset, said
):
    tokens = tmp_path / "train.bin"
    np.arange(size, dtype=np.uint16).tofile(tokens)
    assert said in refused(capsys, "train", write_recipe(_token_recipe(tokens, **dataset)), "--out", tmp_path / "run")


def test_a_short_validation_file_is_named(write_recipe, tmp_path, capsys):
    tokens, val = tmp_path / "train.bin", tmp_path / "val.bin"
    np.arange(1000, dtype=np.uint16).tofile(tokens)
    np.arange(5, dtype=np.uint16).tofile(val)
    err = refused(capsys, "train", write_recipe(_token_recipe(tokens, val_path=str(val))), "--out", tmp_path / "run")
    assert f"token_file: val_path {val} holds 5 tokens, too few to fill one window of context 8" in err


@pytest.mark.parametrize("dtype, told", [("fp16", True), ("bf16", False)])
def test_a_diverged_run_in_fp16_is_told_to_try_bf16(tiny, tmp_path, dtype, told):
    from accel.cli.train import diverged_message
    from accel.config.recipe import validate_recipe
    from accel.runs.records import FitSummary

    recipe = validate_recipe({**tiny, "speedups": {"amp": {"dtype": dtype}}})
    summary = FitSummary(
        status="diverged",
        metrics={},
        samples_per_s=None,
        wall_s=1.0,
        steps=3,
        epochs=0,
        device="cpu",
        diverged_at_step=3,
        run_dir=str(tmp_path),
    )
    message = diverged_message(summary, recipe)
    assert ("bf16 instead of fp16" in message) is told and "a lower learning rate" in message


def test_ctrl_c_in_a_scripts_probe_says_interrupted_not_a_traceback(capsys, tmp_path, monkeypatch):
    from accel.bench import script

    def pressed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(script, "plan_script", pressed)  # the probe runs the script until its first step
    (tmp_path / "train.py").write_text("")
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "env:A=1,2", "--out", str(out), "--", "python", str(tmp_path / "train.py")]
    try:
        code = main(argv)
    except KeyboardInterrupt:  # the traceback a user saw: caught here, or it would stop the whole suite
        code = "raised"
    assert code == 130
    assert capsys.readouterr().err.strip().endswith("interrupted") and not out.exists()
