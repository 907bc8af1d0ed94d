"""`accel bench-data`: an image-folder recipe's input pipelines side by side, on a folder of real JPEGs."""

from __future__ import annotations

import json

from accel.cli import main
from conftest import jpeg_folder


def _recipe(tiny, tmp_path) -> dict:
    tiny["data"] = {
        "dataset": {"name": "imagefolder", "root": str(jpeg_folder(tmp_path / "jpegs")), "image_size": 8},
        "batch_size": 4,
        "loader": {"num_workers": 0},
    }
    return tiny


def test_bench_data_times_each_pipeline_and_writes_json(tiny, write_recipe, tmp_path, capsys):
    out = tmp_path / "bench"
    recipe = write_recipe(_recipe(tiny, tmp_path))
    argv = ["bench-data", str(recipe), "--batches", "2", "--warmup", "1", "--rounds", "2", "--out", str(out)]
    assert main([*argv, "--only", "plain,tuned,cache", "--cache-dir", str(tmp_path / "cache")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["pipeline", "workers", "samples/s"]
    assert [line.split()[0] for line in lines[1:4]] == ["plain", "tuned", "cache"]
    assert lines[4].startswith("16 training images at 8 px; cache ready in ")  # 20 JPEGs, a fifth for validation
    assert lines[-1] == str(out / "bench-data.json")
    report = json.loads((out / "bench-data.json").read_text())
    rows = {row["pipeline"]: row for row in report["rows"]}
    assert all(row["error"] is None and len(row["rounds"]) == 2 and row["samples_per_s"] > 0 for row in rows.values())
    assert rows["plain"]["vs_plain"] == 1.0 and report["facts"]["cache_ready_s"] >= 0
    assert report["command"].startswith("accel bench-data")


def test_bench_data_refuses_a_recipe_without_image_files(tiny, write_recipe, tmp_path, capsys):
    assert main(["bench-data", str(write_recipe(tiny)), "--out", str(tmp_path / "b")]) == 2
    assert "accel bench-data measures image-folder pipelines; recipe tiny uses `synthetic`" in capsys.readouterr().err


def test_bench_data_names_an_unknown_pipeline(tiny, write_recipe, tmp_path, capsys):
    recipe = write_recipe(_recipe(tiny, tmp_path))
    assert main(["bench-data", str(recipe), "--only", "plain,dail", "--out", str(tmp_path / "b")]) == 2
    assert "--only: unknown pipeline(s) dail; choose from plain, tuned, cache, dali" in capsys.readouterr().err
