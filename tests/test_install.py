"""`pip install .` into a fresh environment, then from another folder: the shipped recipes are listed and the
quickstart trains by name. The checkout is copied first, so the build leaves no files in it; torch and the
other dependencies come from this interpreter's site-packages (a .pth line), so nothing is downloaded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT


def _run(*argv: str, cwd: Path, timeout: int = 300) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed accel, not the checkout
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv with accel installed from a copy of the checkout; returns its bin folder."""
    tmp = tmp_path_factory.mktemp("install")
    source = tmp / "source"
    for folder in ("accel", "recipes", "configs"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    venv = tmp / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", str(venv), cwd=tmp)
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    # A plain path line: this environment's packages (torch, pip, setuptools) without its .pth files, so the
    # editable accel installed there is not seen.
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "--disable-pip-version-check",
        str(source),
        cwd=tmp,
    )
    return venv / "bin"


@pytest.mark.slow
def test_accel_recipes_lists_the_shipped_recipes_after_pip_install(installed, tmp_path):
    out = _run(str(installed / "accel"), "recipes", cwd=tmp_path)
    assert "quickstart " in out and "cifar10-resnet18 " in out
    assert str(installed.parent) in out  # the files inside the installed package


@pytest.mark.slow
def test_accel_train_quickstart_by_name_after_pip_install(installed, tmp_path):
    out = tmp_path / "x"
    printed = _run(
        str(installed / "accel"),
        "train",
        "quickstart",
        "--out",
        str(out),
        "--set",
        "train.epochs=1",
        "--set",
        "log.tensorboard=false",
        cwd=tmp_path,
        timeout=600,
    )
    assert printed.strip().splitlines()[-1] == str(out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["metrics"]["val_accuracy"] > 0.2  # chance: 0.1
