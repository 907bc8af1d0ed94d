"""`accel export` end to end on the tiny run: export.json's numbers, pruning, the verification bound, the CLI."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from accel.cli import main
from accel.export import ExportConfig, ExportError, export_run, pipeline, render_table
from accel.runs.records import read_summary

from .conftest import QUICK


@pytest.mark.slow
def test_onnx_export_report_has_sizes_accuracy_agreement_and_latency(onnx_report):
    report = onnx_report
    variants = {row["name"]: row for row in report["variants"]}
    assert list(variants) == ["eager", "onnx", "onnx-dynamic-int8", "onnx-static-int8"]
    eager, onnx = variants["eager"], variants["onnx"]
    assert eager["val_accuracy"] == report["validation"]["accuracy_reported_by_training"]
    assert onnx["val_accuracy"] == eager["val_accuracy"] and onnx["compared_with"] == "eager"
    assert 0 < onnx["max_abs_diff"] <= 1e-4 and report["verified"] is True
    assert report["verification"] == {
        "variant": "onnx",
        "compared_with": "eager",
        "atol": 1e-4,
        "passed": True,
        "max_abs_diff": onnx["max_abs_diff"],
        "same_accuracy": True,
    }
    for name in ("onnx-dynamic-int8", "onnx-static-int8"):
        row = variants[name]
        assert row["compared_with"] == "onnx" and row["max_abs_diff"] > 0 and row["details"]["int8_ops"]
        assert row["accuracy_delta"] == pytest.approx(row["val_accuracy"] - eager["val_accuracy"])
    for row in variants.values():
        assert row["size_bytes"] > row["gzip_bytes"] > 0
        for batch in ("batch_1", "batch_32"):
            assert row["latency"][batch]["runs"] == 3 and 0 < row["latency"][batch]["median_ms"]
    assert report["input"]["dtype"] == "uint8" and len(report["input"]["mean"]) == 1
    assert report["timing"]["threads"] >= 1 and report["versions"]["onnxruntime"]
    out = Path(report["out"])
    assert json.loads((out / "export.json").read_text()) == report
    assert sorted(p.name for p in out.iterdir()) == [
        "export.json",
        "model.dynamic-int8.onnx",
        "model.onnx",
        "model.static-int8.onnx",
    ]
    table = render_table(
        {**report, "timing": {**report["timing"], "busy": None}}
    )  # the note: tests/export/test_busy.py
    assert table.count("\n") == 5 and "| onnx-static-int8 | onnxruntime |" in table


@pytest.mark.slow
def test_pruned_export_is_compared_with_the_pruned_model_and_reports_sparsity(tiny_run, tmp_path):
    report = export_run(tiny_run, ExportConfig(format="exported", prune=0.3, finetune_steps=2, out=tmp_path, **QUICK))
    assert report["prune"]["sparsity"] == pytest.approx(0.3, abs=0.01) and report["prune"]["finetune"]["steps"] == 2
    rows = {row["name"]: row for row in report["variants"]}
    assert list(rows) == ["eager", "eager-pruned", "exported"]
    assert rows["eager-pruned"]["compared_with"] == "eager" and rows["eager-pruned"]["max_abs_diff"] > 0
    assert rows["exported"]["compared_with"] == "eager-pruned" and report["verified"]
    assert rows["eager-pruned"]["gzip_bytes"] < rows["eager"]["gzip_bytes"]  # zeros compress; dense files do not
    program = torch.export.load(str(tmp_path / "model.pt2"))
    weights = [t for name, t in program.state_dict.items() if name.endswith("weight") and t.dim() in (2, 4)]
    zeros = sum(int((w == 0).sum()) for w in weights) / sum(w.numel() for w in weights)
    assert zeros == pytest.approx(0.3, abs=0.01)  # the shipped file holds the pruned weights


def test_export_beyond_the_tolerance_fails_after_writing_the_report(tiny_run, tmp_path, monkeypatch):
    real = pipeline.load_runner

    def off_by_a_little(fmt, path, threads):
        run = real(fmt, path, threads)
        return lambda images: run(images) + 1e-3

    monkeypatch.setattr(pipeline, "load_runner", off_by_a_little)
    with pytest.raises(ExportError, match=r"differ from PyTorch's by up to 0.001 .*--atol 0.0001"):
        export_run(tiny_run, ExportConfig(format="exported", out=tmp_path, **QUICK))
    report = json.loads((tmp_path / "export.json").read_text())
    assert report["verified"] is False and report["verification"]["max_abs_diff"] == pytest.approx(1e-3, rel=1e-2)


def test_cli_exports_prints_the_table_and_refuses_bad_input_with_exit_2(tiny_run, tmp_path, capsys):
    out = tmp_path / "ts"
    argv = [
        "export",
        str(tiny_run / "checkpoints" / "last.pt"),
        "--format",
        "torchscript",
        "--out",
        str(out),
        "--runs",
        "2",
        "--warmup",
        "0",
        "--batch-size",
        "8",
        "--threads",
        "1",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("| variant |") and printed[-1] == str(out / "export.json")
    assert json.loads((out / "export.json").read_text())["timing"]["threads"] == 1
    (tmp_path / "empty").mkdir()
    assert main(["export", str(tmp_path / "empty")]) == 2
    assert "has no checkpoint" in capsys.readouterr().err
    assert main(["export", str(tiny_run), "--prune", "1.5"]) == 2
    assert "`prune` = 1.5" in capsys.readouterr().err


@pytest.mark.slow
def test_an_interrupted_run_is_not_compared_with_its_last_evaluation(tiny_run, tmp_path, caplog):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("export"))
    summary = read_summary(run / "summary.json")
    (run / "summary.json").write_text(summary.model_copy(update={"status": "interrupted"}).to_json())
    with caplog.at_level(logging.WARNING, logger="accel"):
        report = export_run(run, ExportConfig(**QUICK))
    said = (
        "the run is interrupted: last.pt holds the weights of the step it stopped at, not those of its last "
        "evaluation, so training's val_accuracy is not compared"
    )
    assert report["validation"]["accuracy_reported_by_training"] is None
    assert report["validation"]["note"].startswith(said) and said in caplog.text


def test_export_refuses_an_out_that_is_a_file_or_holds_a_run(tiny_run, tmp_path, capsys):
    mine = tmp_path / "model.onnx"
    mine.write_text("not yours")
    assert main(["export", str(tiny_run), "--out", str(mine)]) == 2
    assert (
        f"error: {mine} is a file; `accel export` writes a folder there. Choose another --out."
        in capsys.readouterr().err
    )
    assert mine.read_text() == "not yours"
    assert main(["export", str(tiny_run), "--out", str(tiny_run)]) == 2
    said = capsys.readouterr().err
    assert f"error: --out {tiny_run} names the source ({tiny_run}), which `accel export` reads" in said
    another = tmp_path / "another"
    shutil.copytree(tiny_run, another, ignore=shutil.ignore_patterns("export"))
    assert main(["export", str(tiny_run), "--out", str(another)]) == 2
    assert f"error: {another} already holds a run (recipe.yaml, summary.json" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_fine_tuned_from_a_weights_file_exports_without_it(tiny_run, tmp_path):
    """The checkpoint holds the trained weights: the pretrained file the recipe names may be gone by now."""
    import yaml

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("export"))
    recipe = yaml.safe_load((run / "recipe.yaml").read_text())
    recipe["model"]["weights"] = {"path": str(tmp_path / "deleted.pt"), "strict": True}
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    report = export_run(run, ExportConfig(**QUICK))
    assert report["validation"]["accuracy_reported_by_training"] is not None


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the exporter folds huge weights
def test_a_diverged_run_writes_strict_json_and_no_advice_that_cannot_apply(tiny_run, tmp_path, capsys):
    run, out = tmp_path / "run", tmp_path / "export"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("export"))
    summary = read_summary(run / "summary.json")
    (run / "summary.json").write_text(
        summary.model_copy(update={"status": "diverged", "diverged_at_step": 9}).to_json()
    )
    last = run / "checkpoints" / "last.pt"
    state = torch.load(last, weights_only=True)
    for tensor in state["model"].values():  # finite weights whose outputs overflow, as a diverged run keeps
        if tensor.is_floating_point():
            tensor.mul_(1e30)
    torch.save(state, last)
    argv = ["export", str(run), "--out", str(out), "--runs", "2", "--warmup", "0", "--batch-size", "8"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error: The model's own logits hold NaN or infinity on the validation set" in err
    assert "atol" not in err and "Traceback" not in err
    text = (out / "export.json").read_text()

    def refuse(constant):
        raise AssertionError(f"export.json holds a bare {constant}")

    report = json.loads(text, parse_constant=refuse)  # what every JSON parser reads: no NaN, no Infinity
    assert report["verified"] is False and report["verification"]["max_abs_diff"] is None
    note = report["validation"]["note"]
    assert note.startswith("the run diverged: last.pt holds the last weights it kept") and "Resume" not in note


@pytest.mark.slow
def test_ctrl_c_during_an_export_exits_130_and_its_export_json_says_nothing_was_exported(
    tiny_run, tmp_path, capsys, monkeypatch
):
    import os
    import signal

    def ctrl_c(*args, **kwargs):  # the model file is written by now; its timing has not begun
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(pipeline, "latency", ctrl_c)
    out = tmp_path / "onnx"
    assert main(["export", str(tiny_run), "--out", str(out), "--runs", "3", "--warmup", "1"]) == 130
    err = capsys.readouterr().err
    assert "interrupted: nothing exported" in err and "Traceback" not in err
    record = json.loads((out / "export.json").read_text())
    assert record["interrupted"] is True and record["verified"] is False and record["removed"] == ["model.onnx"]
    assert record["files"] == [] and sorted(p.name for p in out.iterdir()) == ["export.json"]
    assert "nothing was exported" in record["note"]


def test_an_export_interrupted_while_writing_a_file_leaves_no_file_but_its_export_json(tiny_run, tmp_path, monkeypatch):
    def half_written(mode, source, target, calibration):  # Ctrl-C in the middle of writing the int8 graph
        target.write_bytes(source.read_bytes()[:100])
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "quantize", half_written)
    out = tmp_path / "onnx"
    with pytest.raises(KeyboardInterrupt):
        export_run(tiny_run, ExportConfig(out=out, quantize=["dynamic-int8"], **QUICK))
    assert sorted(p.name for p in out.iterdir()) == ["export.json"]
    record = json.loads((out / "export.json").read_text())
    assert record["removed"] == ["model.dynamic-int8.onnx", "model.onnx"] and record["files"] == []
    assert record["interrupted"] is True and record["verified"] is False
