"""The package's rooms and what each may import (docs/architecture.md, "Rooms"): read from the source, so a new
import that points up a layer, a module-level import cycle, a crowded package root or a second module of the same
name fails here rather than in review."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "accel"

# Bottom to top: a room imports its own layer and those below it. The same table is drawn in docs/architecture.md.
LAYERS = [
    {"root"},  # errors, io, devices, batches, schema, registry, quiet
    {"strategy"},
    {"runs", "models", "tasks", "optimizers", "measure"},
    {"speedups", "callbacks", "data"},
    {"config"},
    {"engine"},
    {"train"},
    {"bench", "profile", "export"},
    {"cli", "launch"},
    {"trial"},  # the trial's side, inside a script's process: nothing imports it (`test_nothing_imports_the_trial`)
]
# Imports that point up, each for a reason, called inside a function
UPWARD = {
    # `torchvision:NAME` and `timm:NAME` are names in the model registry, built by the libraries' own builders
    ("accel.registry", "accel.models.libraries"),
}
# Names a module may share with another room's: the seams' roles (`records`: a room's typed files, the bench's
# and the run's), and the CLI's modules named after commands
ROLES = {"base", "errors", "pipeline", "records", "report", "script"}
ROOT_MODULES_AT_MOST = 10


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 2 and MODULES[module].name != "__init__.py":
        return "root"
    return parts[1] if len(parts) > 1 else "root"


def layer(name: str) -> int:
    return next(i for i, rooms in enumerate(LAYERS) if name in rooms)


def imports(module: str, top_level_only: bool = False, typing: bool = False) -> set[str]:
    """The accel modules `module` imports when it runs: not those under `if TYPE_CHECKING:` (with `typing`, those
    too); with `top_level_only`, only those its import runs (not inside functions or classes)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    typed = [node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if typing:
        nodes = nodes + [inner for node in typed for inner in node.body]
    skipped = set() if typing else {id(inner) for node in typed for inner in ast.walk(node)}
    found = set()
    for node in nodes:
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in MODULES and name != module}


def test_every_import_points_down_a_layer_or_is_a_named_exception():
    wrong = sorted(
        f"{module} imports {target} ({room(module)} -> {room(target)})"
        for module in MODULES
        for target in imports(module)
        if layer(room(target)) > layer(room(module)) and (module, target) not in UPWARD
    )
    assert not wrong, "imports up a layer (docs/architecture.md, Rooms):\n" + "\n".join(wrong)


def test_nothing_imports_the_trial():
    """The trial's side (accel/trial) runs inside a script's process, loaded by its sitecustomize: the rest of accel
    only names it on a trial's PYTHONPATH and command line, and an engine meets it through the observers its
    process registers (accel.engine.process_observers), so no import of it, even inside a function or for types."""
    wrong = sorted(
        f"{module} imports {target}"
        for module in MODULES
        if room(module) != "trial"
        for target in imports(module, typing=True)
        if room(target) == "trial"
    )
    assert not wrong, "imports of the trial's side (docs/architecture.md, Rooms):\n" + "\n".join(wrong)


def test_every_room_is_in_a_layer():
    rooms = {room(module) for module in MODULES if module != "accel"}
    assert rooms == set().union(*LAYERS)


def test_no_import_cycle_when_modules_load():
    graph = {module: _with_packages(module, imports(module, top_level_only=True)) for module in MODULES}
    done, path = set(), []

    def visit(module: str) -> None:
        if module in path:
            cycle = path[path.index(module) :] + [module]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        path.append(module)
        for target in sorted(graph[module]):
            visit(target)
        path.pop()
        done.add(module)

    for module in sorted(MODULES):
        visit(module)


# Modules that know each other by type only (a part typed against its owner), each knot named: the Trainer and the
# loop's parts that take it (callbacks among them; the speed lint, FLOP counting and the profile window read the
# engine's core instead), the bench's own (a runner and its real run, tune's search and its stages: the range
# test, the levers) and the trial's (the instrument's recorder and its parts)
KNOTS = [
    {"callbacks.base", "train.divergence", "train.evaluation", "train.fit_summary", "train.stopping", "train.trainer"},
    {"bench.real_run", "bench.runner"},
    {"bench.tune.levers", "bench.tune.lr_range", "bench.tune.search"},
    {"trial.instrument.profiled", "trial.instrument.recorder", "trial.instrument.trial_record"},
]


def test_no_import_cycle_by_type_but_the_named_knots():
    """The core and its seams above all: a speed-up or a strategy types against accel.strategy.slots, not the core."""
    graph = {module: imports(module, top_level_only=True, typing=True) for module in MODULES}
    allowed = [{f"accel.{name}" for name in knot} for knot in KNOTS]
    for knot in _strongly_connected(graph):
        assert any(knot <= named for named in allowed), "modules that import each other: " + ", ".join(sorted(knot))


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of two or more modules each reachable from every other (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = set()
            while not group or module not in group:
                group.add(stack.pop())
            if len(group) > 1:
                found.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


@pytest.mark.slow
def test_the_trainer_brings_no_model_dataset_recipe_or_bench_module():
    """`import accel.train.trainer` (bring your own model and data) loads none of them (accel/__init__.py)."""
    code = "import sys, accel.train.trainer; print(' '.join(m for m in sys.modules if m.startswith('accel.')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    unwanted = ("accel.data", "accel.bench", "accel.config.recipe", "accel.config.shipped", "accel.models.")
    assert [m for m in loaded if m.startswith(unwanted) and m != "accel.models.blocks"] == []


def _with_packages(module: str, targets: set[str]) -> set[str]:
    """Importing a.b.c runs a and a.b first: those of them not already running as `module`'s own packages."""
    own = _packages(module)
    return targets | {package for target in targets for package in _packages(target) - own}


def _packages(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))} | {module}


def test_the_package_root_holds_few_modules():
    root = sorted(module for module in MODULES if room(module) == "root")
    assert len(root) <= ROOT_MODULES_AT_MOST, root


def test_no_two_modules_share_a_name_but_the_seams_roles():
    names = Counter(
        path.stem
        for module, path in MODULES.items()
        if path.name != "__init__.py" and room(module) != "cli" and path.stem not in ROLES
    )
    assert [name for name, count in names.items() if count > 1] == []


@pytest.mark.slow
def test_every_documented_import_works():
    """`import accel...` and `from accel... import ...` lines of the README and docs/ (and accel's public names),
    run in one fresh interpreter: a move between rooms keeps every path a user was shown."""
    root = PACKAGE.parent
    lines = {
        line.strip().lstrip("+")
        for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
        for line in doc.read_text().splitlines()
        if line.strip().lstrip("+").startswith(("import accel", "from accel"))
    }
    names = "import accel\n" + "".join(f"accel.{name}\n" for name in __import__("accel").__all__)
    assert len(lines) >= 5, lines  # the README and docs do show imports
    done = subprocess.run([sys.executable, "-c", names + "\n".join(sorted(lines))], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
