"""Messages that blame the right thing (issue 39): a `--set` that replaces a section, a key merged from a `base:`
file, a recipe that is a folder or a Python script, a run name that is a path, a dangling-link --out, the slurm
options; and a module beside the recipe or in the current folder, found as `python train.py` finds one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from accel.cli import main
from accel.errors import AccelError
from accel.io import check_creatable
from accel.launch.cluster import Job, slurm
from conftest import ROOT


def _fails_cleanly(capsys, *argv: str) -> str:
    """Exit code 2, one message, no traceback."""
    assert main([str(arg) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def test_a_set_that_replaces_a_section_is_blamed_not_the_files_line(capsys, tiny, write_recipe):
    err = _fails_cleanly(capsys, "train", write_recipe(tiny), "--set", "data={batch_size: 4}")
    assert "--set data={batch_size: 4}: `data.dataset` is required but missing" in err
    assert "recipe.yaml, line" not in err


def test_a_set_that_replaces_a_section_says_so_and_how_to_set_only_its_keys(capsys, tiny, write_recipe):
    argv = ["--set", "data={batch_size: 4, loader: {num_workers: 0}}", "--set", "optim={lr: 0.1, betas: [0.9, 0.95]}"]
    err = _fails_cleanly(capsys, "train", write_recipe(tiny), *argv)
    assert (
        "`data.dataset` is required but missing. A mapping given to --set replaces the whole `data` section, the "
        "recipe's other keys there too; to change only these keys, set each one: "
        "`--set data.batch_size=4 --set data.loader.num_workers=0`."
    ) in err
    assert (
        "`optim` needs a `name` (optimizer to use). A mapping given to --set replaces the whole `optim` section, "
        "the recipe's other keys there too; to change only these keys, set each one: "
        "`--set optim.lr=0.1 --set 'optim.betas=[0.9, 0.95]'`."
    ) in err


def test_a_key_merged_from_a_base_file_names_the_file_that_set_its_section(capsys, tiny, write_recipe, tmp_path):
    tiny["optim"] = {"name": "adamw", "betas": [0.9, 0.95]}
    write_recipe(tiny, "base.yaml")
    top = write_recipe("base: base.yaml\noptim: {name: sgd}\n", "top.yaml")
    err = _fails_cleanly(capsys, "train", top, "--out", tmp_path / "run")
    base_line = yaml.safe_dump(tiny, sort_keys=False).splitlines().index("  betas:") + 1
    assert (
        f"{tmp_path / 'base.yaml'}, line {base_line} (merged from `base:` into `optim` at {top}, line 2): "
        "`optim.betas` is not a valid key"
    ) in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/absolute", "a/b", ".."])
def test_a_run_name_that_is_a_path_is_refused_before_anything_is_written(
    capsys, tiny, write_recipe, tmp_path, monkeypatch, name
):
    tiny["name"] = name
    recipe = write_recipe(tiny)
    monkeypatch.chdir(tmp_path)  # runs/ would be made here
    err = _fails_cleanly(capsys, "train", recipe)
    assert f"`name` = {name!r}" in err and "plain folder name" in err and "--out" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recipe.yaml"]


def test_a_recipe_that_is_a_folder_is_called_one(capsys, tmp_path):
    err = _fails_cleanly(capsys, "train", tmp_path)
    assert f"{tmp_path} is a folder, not a recipe file" in err and "not found" not in err


@pytest.mark.parametrize("command", [["train"], ["doctor"], ["bench-data"]])
def test_a_python_script_given_as_a_recipe_is_named_as_a_script(capsys, tmp_path, command):
    script = tmp_path / "train.py"
    script.write_text("import accel\n")
    err = _fails_cleanly(capsys, *command, script)
    assert f"{script} is a Python script, not a recipe" in err and "YAML syntax error" not in err
    assert f"`accel bench -- python {script}` measures it" in err


@pytest.mark.slow
@pytest.mark.parametrize("command", [["bench", "--ablate"], ["tune"], ["profile"]])
def test_the_measuring_commands_run_a_script_and_say_when_it_has_no_engine(capsys, tmp_path, command):
    script = tmp_path / "train.py"
    script.write_text("import accel\n")
    assert main([*command, str(script)]) == 2
    probe, _, err = capsys.readouterr().err.partition("\n")
    assert probe.startswith("probe: running the script until it starts training")  # said at once, before it ends
    assert err.startswith("error: ") and "Traceback" not in err
    assert "ran to its end without stepping an optimizer" in err and "YAML syntax error" not in err


def test_a_dangling_link_as_out_is_named_as_one(capsys, tiny, write_recipe, tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    err = _fails_cleanly(capsys, "train", write_recipe(tiny), "--out", link)
    assert f"--out {link} is a link to {tmp_path / 'gone'}, which does not exist" in err and "File exists" not in err
    with pytest.raises(AccelError, match="is a link to .*, which does not exist"):
        check_creatable(link)
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_slurm_partition_error_gives_a_partition_as_its_example(tmp_path):
    with pytest.raises(AccelError, match=r"--partition 'gpu a100': expected one word, such as --partition gpu\.$"):
        slurm.script(Job(name="x", recipe="r.yaml", out=str(tmp_path), nodes=1, gpus_per_node=1), partition="gpu a100")


MODULE = """from torch import nn


def build(num_classes=4, **_):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))
"""
# the `accel` console script: sys.path holds neither the current folder nor the recipe's (`-P`)
CONSOLE = [sys.executable, "-P", "-c", "import sys; from accel.cli import main; sys.exit(main())"]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["beside the recipe", "in the current folder"])
def test_the_accel_command_imports_a_module_beside_the_recipe_or_in_the_current_folder(tiny, tmp_path, where):
    recipe_dir, cwd = tmp_path / "project", tmp_path / "elsewhere"
    recipe_dir.mkdir(), cwd.mkdir()
    (recipe_dir if where == "beside the recipe" else cwd).joinpath("mymodel.py").write_text(MODULE)
    tiny["model"] = {"name": "mymodel:build"}
    tiny["train"]["epochs"] = 1
    (recipe_dir / "recipe.yaml").write_text(yaml.safe_dump(tiny))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [*CONSOLE, "train", str(recipe_dir / "recipe.yaml"), "--out", str(tmp_path / "run")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "checkpoints" / "last.pt").is_file()


def test_the_roots_come_after_the_installed_packages_and_only_for_a_recipe_that_names_user_code(
    tiny, tmp_path, monkeypatch
):
    from accel.config.recipe import load_recipe

    recipe = tmp_path / "project" / "recipe.yaml"
    recipe.parent.mkdir(), (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    recipe.write_text(yaml.safe_dump(tiny))
    before = list(sys.path)
    load_recipe(recipe)
    assert sys.path == before  # a registered model: nothing to import from there
    tiny["model"] = {"name": "mymodel:build"}
    recipe.write_text(yaml.safe_dump(tiny))
    load_recipe(recipe)
    assert sys.path[: len(before)] == before and sys.path[len(before) :] == [str(recipe.parent), os.getcwd()]
    assert os.environ["PYTHONPATH"].split(os.pathsep)[-2:] == [str(recipe.parent), os.getcwd()]
