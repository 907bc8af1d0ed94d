"""The instrument starts however a script reaches torch (accel/trial/instrument/import_watch.py): after a look-up
that imports nothing, inside a function, through a library that imports it first, through runpy, under a launcher.
Each script would train far past the trial's 2 steps: only a recorder that started ends it there with its record."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accel.bench.records import Trial
from accel.bench.trial_process import instrumented_pythonpath
from accel.engine import trial_variables
from conftest import ROOT

TRAIN = """
def train():
    import torch

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10_000):
        model(torch.randn(8, 4)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    raise SystemExit("trained to the end: accel's recorder did not start")


train()
"""
# the availability checks a script or library makes before it imports torch (each one, alone, used up the import
# watch that the recorder waited on)
LOOK_UPS = """
import importlib.metadata, importlib.util, pkgutil
assert importlib.util.find_spec("torch") and importlib.metadata.version("torch")
assert any(m.name == "torch" for m in pkgutil.iter_modules())
assert getattr(pkgutil, "find_loader", bool)("torch")  # gone in Python 3.14
"""
LAZY = """
import importlib.util, sys
spec = importlib.util.find_spec("torch")
spec.loader = importlib.util.LazyLoader(spec.loader)
sys.modules["torch"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sys.modules["torch"])
"""
LIBRARIES = {  # each looks torch up (find_spec, metadata) or imports it as it is imported
    "datasets": "import datasets",
    "transformers": "import transformers\nassert transformers.utils.is_torch_available()\nimport transformers.trainer",
    "lightning": "import lightning",
    "accelerate": "import accelerate",
    "timm": "import timm",
}


def _variables(record: Path) -> dict[str, str]:
    return {
        "PYTHONPATH": instrumented_pythonpath(),
        trial_variables.PATH: str(record),
        trial_variables.STEPS: "1",
        trial_variables.WARMUP: "1",
    }


def _measured(tmp_path: Path, command: list[str], cwd: Path | None = None) -> None:
    """Run `command` as a bench trial; it must end with the recorder's record of its timed step."""
    record = tmp_path / "trial.json"
    env = os.environ | _variables(record)
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    trial = Trial.model_validate_json(record.read_text())
    assert trial.error is None and trial.steps == 1 and trial.samples_per_s > 0


def _script(tmp_path: Path, before: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(f"{before}\n{TRAIN}")
    return path


@pytest.mark.slow
def test_the_recorder_starts_after_availability_checks_of_torch_imported_in_a_function(tmp_path):
    _measured(tmp_path, [sys.executable, str(_script(tmp_path, LOOK_UPS))])


@pytest.mark.slow
def test_the_recorder_starts_when_torch_is_imported_lazily(tmp_path):
    _measured(tmp_path, [sys.executable, str(_script(tmp_path, LAZY))])


@pytest.mark.slow
@pytest.mark.parametrize("library", list(LIBRARIES))
def test_the_recorder_starts_when_a_library_imports_torch_first(tmp_path, library):
    pytest.importorskip(library)
    _measured(tmp_path, [sys.executable, str(_script(tmp_path, LIBRARIES[library]))])


@pytest.mark.slow
def test_the_recorder_starts_in_a_module_run_with_python_m_and_runpy(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(TRAIN)
    _measured(tmp_path, [sys.executable, "-m", "pkg.train"], cwd=tmp_path)
    (tmp_path / "trial.json").unlink()
    runner = tmp_path / "run.py"
    runner.write_text(f"import runpy\nrunpy.run_path({str(package / 'train.py')!r}, run_name='__main__')\n")
    _measured(tmp_path, [sys.executable, str(runner)])


LAUNCHERS = {
    "torchrun": ["torchrun", "--nproc-per-node", "1", "--master-port", "0"],
    "accel run": ["accel", "run", "--"],
    "accelerate launch": ["accelerate-launch", "--cpu", "--num_processes", "1", "--num_machines", "1"],
}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_the_recorder_starts_in_the_rank_a_launcher_starts(tmp_path, launcher):
    # the launcher imports torch itself, in a process that never steps; the rank it starts is measured
    program, *options = LAUNCHERS[launcher]
    found = shutil.which(program, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(f"`{program}` is not installed beside {sys.executable}")
    script = _script(tmp_path, "")
    python = [sys.executable] if launcher == "accel run" else []
    _measured(tmp_path, [found, *options, *python, str(script)], cwd=ROOT)
