"""The optional packages: each place that needs an extra names it and its pip command when it is missing (a missing
package is simulated with a None in sys.modules, which makes its import fail and its look-up find nothing), the
quickstart needs none, and set-up installs and pins what the tests use."""

from __future__ import annotations

import re
import sys

import pytest

from accel import devices, extras
from accel.config.recipe import load_recipe
from accel.data.cpu_transforms import build_transform
from accel.data.datasets.digits import Digits
from accel.errors import AccelError
from accel.export.pipeline import export_run
from accel.models.libraries import library_model
from accel.train.run import run_recipe
from conftest import ROOT

NOT_SET_UP = {"xla", "float8", "liger"}  # each needs hardware or a torch of its own; none installed by setup or CI


@pytest.fixture
def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _missing(monkeypatch, *modules: str) -> None:
    """Each of `modules` and its submodules an earlier test imported (a cached `sklearn.datasets` imports even
    with `sklearn` blocked)."""
    for name in modules:
        for loaded in [module for module in sys.modules if module.startswith(name + ".")]:
            monkeypatch.setitem(sys.modules, loaded, None)
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize(
    ("module", "extra", "call"),
    [
        ("onnxruntime", "export", lambda tmp: export_run(tmp / "run")),
        ("sklearn", "data", lambda tmp: Digits.build(Digits.Config(name="digits"), seed=0)),
        ("albumentations", "data", lambda tmp: build_transform("albumentations", "HorizontalFlip")),
        ("timm", "timm", lambda tmp: library_model("timm:resnet18", {"num_classes": 2}, {})),
        ("torch_xla", "xla", lambda tmp: devices.resolve_device("xla")),
    ],
)
def test_a_missing_extra_is_named_with_its_pip_command(monkeypatch, tmp_path, module, extra, call):
    _missing(monkeypatch, module)
    with pytest.raises((AccelError, ValueError), match=rf"needs {module}\b.*pip install 'accel\[{extra}\]'"):
        call(tmp_path)


def test_a_dependency_missing_inside_an_installed_package_keeps_its_own_error(monkeypatch, tmp_path):
    (tmp_path / "accel_fake_library.py").write_text("import accel_fake_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "accel_fake_dependency", None)
    with pytest.raises(ModuleNotFoundError, match="accel_fake_dependency"):
        extras.import_or_explain("accel_fake_library", "a test")
    with pytest.raises(AccelError, match="a test needs accel_fake_dependency.*pip install accel_fake_dependency"):
        extras.import_or_explain("accel_fake_dependency", "a test")


def test_a_scripts_missing_module_of_an_extra_gets_the_extras_command():
    tail = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'lightning'\n"
    assert "pip install 'accel[lightning]'" in extras.hint(tail)
    assert extras.hint("ModuleNotFoundError: No module named 'mylib'") == ""


def test_every_module_names_an_extra_of_pyproject(pyproject):
    assert set(extras.EXTRA_OF.values()) <= set(pyproject["optional-dependencies"])


def test_setup_installs_every_extra_the_tests_use_and_constraints_pin_them(pyproject):
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    installed = set(re.search(r"^TEST_EXTRAS=(\S+)$", setup, re.M).group(1).split(","))
    assert installed == set(pyproject["optional-dependencies"]) - NOT_SET_UP
    pinned = {line.split("==")[0].lower() for line in (ROOT / "constraints.txt").read_text().splitlines()}
    needed = [*pyproject["dependencies"], *(r for e in installed for r in pyproject["optional-dependencies"][e])]
    names = {re.match(r"[\w.-]+", requirement).group(0).lower() for requirement in needed}
    assert names <= pinned
    assert "setup.sh core" in (ROOT / "scripts" / "quickstart.sh").read_text()


@pytest.mark.slow  # a few seconds of training
def test_the_quickstart_trains_with_no_extra_installed(monkeypatch, tmp_path):
    _missing(monkeypatch, *(m for m in extras.EXTRA_OF if m != "nvidia"), "nvidia.dali")
    recipe = load_recipe("quickstart", ["train.max_steps=2", "log.tensorboard=false", "data.dataset.val_fraction=0.02"])
    assert run_recipe(recipe, out=tmp_path / "run")["status"] == "completed"
