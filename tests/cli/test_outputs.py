"""No command writes over what it reads: an output that names an input is refused before anything runs
(accel/cli/outputs.py)."""

from __future__ import annotations

import os
import sys

import pytest

from accel.cli import main


def _refused(capsys, argv: list[str], output: str, given: str) -> None:
    """Exit 2 with one line that names the output and the input; no traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert output in err and given in err, err


@pytest.mark.parametrize("spelling", ["same", "dotted", "symlink", "hard link"])
def test_history_refuses_a_page_over_the_history_it_reads(tmp_path, capsys, monkeypatch, spelling):
    history = tmp_path / "h.jsonl"
    history.write_text("every measurement\n")
    monkeypatch.chdir(tmp_path)
    if spelling == "symlink":
        os.symlink(history, tmp_path / "link.jsonl")
    if spelling == "hard link":
        os.link(history, tmp_path / "link.jsonl")
    page = {"same": "h.jsonl", "dotted": "./h.jsonl", "symlink": "link.jsonl", "hard link": "link.jsonl"}[spelling]
    _refused(capsys, ["history", "h.jsonl", "--html", page], f"--html {page} names", "h.jsonl")
    assert history.read_text() == "every measurement\n"


def test_bench_refuses_a_history_over_its_recipe_before_any_trial(tiny, write_recipe, tmp_path, capsys, monkeypatch):
    def trials(*args, **kwargs):
        raise AssertionError("a trial ran")

    monkeypatch.setattr("accel.bench.rev_plan.bench_revisions", trials)
    base = write_recipe({"seed": 1}, "base.yaml")
    recipe = write_recipe({"base": base.name, **tiny})
    before = base.read_text()
    argv = ["bench", str(recipe), "--out", str(tmp_path / "b"), "--history", str(base)]
    _refused(capsys, argv, f"--history {base}", "a `base:` file of the recipe")
    assert base.read_text() == before


def test_bench_refuses_two_outputs_at_one_path(tiny, write_recipe, tmp_path, capsys, monkeypatch):
    def trials(*args, **kwargs):
        raise AssertionError("a trial ran")

    monkeypatch.setattr("accel.bench.rev_plan.bench_revisions", trials)
    both = tmp_path / "speed"
    argv = ["bench", str(write_recipe(tiny)), "--out", str(both), "--history", str(both)]
    _refused(capsys, argv, f"--out {both} and --history {both} name the same path", "Choose another --history")


def test_profile_refuses_an_out_over_a_file_the_scripts_command_names(tmp_path, capsys):
    script, data = tmp_path / "train.py", tmp_path / "data.csv"
    script.write_text("raise SystemExit('never run')\n")
    data.write_text("1,2\n")
    command = ["--", sys.executable, str(script), f"--data={data}"]
    _refused(capsys, ["profile", "--out", str(data), *command], f"--out {data} names", "the script's command")


def test_slurm_refuses_a_job_script_over_its_recipe(tiny, write_recipe, capsys):
    recipe = write_recipe(tiny)
    before = recipe.read_text()
    argv = ["slurm", str(recipe), "--nodes", "1", "--gpus-per-node", "1", "--script", str(recipe)]
    _refused(capsys, argv, f"--script {recipe} names the recipe", str(recipe))
    assert recipe.read_text() == before


def test_a_script_token_too_long_to_be_a_path_is_no_input():
    from argparse import Namespace

    from accel.cli.outputs import check_apart

    check_apart(Namespace(command="bench", out="bench", history=None, recipe=None, user_script=["t.py", "x" * 5000]))
