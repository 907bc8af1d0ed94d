"""A speed-up is one file: a module in a package of its own, imported (registering as the built-in ones do), is
picked up by recipes, bench ablations, tune's candidates, `accel speedups`, the speed-up contract, the conflict
rule (the run's own choices too) and what its declared traits tell the lint, the bench and the own loop, with no
other edit."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest
import torch

import accel
from accel.bench.knobs import build_knobs
from accel.bench.variants import ablation_variants
from accel.cli import main
from accel.config.recipe import validate_recipe
from accel.errors import AccelError
from accel.measure.traps import codes
from accel.registry import SPEEDUPS
from accel.speedups import compile_figures

from . import test_contract
from .conftest import RECIPE, tiny_trainer

NAME = "count_batches"
MODULE = '''
"""`count_batches`: a speed-up written outside accel, in one file."""
from pydantic import Field

from accel.measure.traps import Finding
from accel.speedups import Candidate, Phase, Speedup, SpeedupConfig, registered


@registered("count_batches")
class CountBatches(Speedup):
    """Counts the training batches it saw; a stand-in for a real speed-up."""

    class Config(SpeedupConfig):
        every: int = Field(1, ge=1, description="count every N-th batch")

    phase = Phase.KERNELS
    tune = (Candidate({"every": 2}),)
    compiles_model = True
    reports_compile = True
    lint_finding = Finding("counting-batches", "speed-up count_batches is on.", "remove `speedups.count_batches`.")

    def conflict(self, context):
        if context.run.grad_accum > 1:  # the run's own choices reach it as they reach the built-in ones
            return "counts optimizer steps, not micro-batches; use grad_accum 1"
        return None

    def __init__(self, cfg=None):
        super().__init__(cfg)
        self.seen = 0

    def after_batch(self) -> None:
        self.seen += 1

    def metrics(self) -> dict:
        return {"batches": self.seen // self.cfg.every}

    def state_dict(self) -> dict:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict) -> None:
        self.seen = state.get("seen", 0)
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The package `mine` with the speed-up's module, importable and imported; unregistered afterwards."""
    root = tmp_path_factory.mktemp("user_code")
    (root / "mine").mkdir()
    (root / "mine" / "__init__.py").write_text("")
    (root / "mine" / "count_batches.py").write_text(textwrap.dedent(MODULE))
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("mine.count_batches")
    finally:
        sys.path.remove(str(root))
        for module in ("mine.count_batches", "mine"):
            sys.modules.pop(module, None)
        SPEEDUPS._entries.pop(NAME, None)  # other tests see only the built-in speed-ups


def test_a_recipe_enabling_it_validates_and_trains(installed):
    summary = tiny_trainer({NAME: {"every": 1}}).fit()
    assert summary["status"] == "completed" and NAME in summary["speedups"]
    assert summary["speedup_metrics"][NAME] == {"batches": 2}


def test_bench_ablates_it(installed):
    recipe = validate_recipe({**RECIPE, "speedups": {NAME: {}, "channels_last": {}}})
    names = [v.name for v in ablation_variants(recipe.dump()["speedups"])]
    assert {f"+{NAME}", f"-{NAME}"} <= set(names)


def test_tune_tries_its_own_candidates(installed):
    recipe = validate_recipe({**RECIPE, "speedups": {}})
    knobs = {k.key: k for k in build_knobs(recipe, speedups=True, device=torch.device("cpu"))}
    knob = knobs[f"speedups.{NAME}"]
    assert knob.labels == ["off", "every=2"] and knob.values[1] == {"every": 2, "enabled": True}


def test_accel_speedups_lists_it(installed, capsys):
    assert main(["speedups"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.split()[0] == NAME]
    assert listed == [f"{NAME:24s} Counts the training batches it saw; a stand-in for a real speed-up.  [available]"]


def test_the_speedup_contract_covers_it(installed):
    test_contract.test_class_and_config_are_documented(NAME)
    test_contract.test_config_round_trips_and_rejects_misspelt_options(NAME)
    fitted = test_contract._fit_from_unusual_globals(NAME)
    test_contract.test_two_steps_give_a_finite_loss(NAME, lambda _: fitted)
    test_contract.test_teardown_restores_global_state(NAME, lambda _: fitted)
    test_contract.test_state_survives_a_checkpoint_round_trip(NAME, lambda _: fitted)
    start = tiny_trainer({})
    before = test_contract.weights(start)
    start.fit()
    test_contract.test_disabled_equals_absent(NAME, (before, test_contract.weights(start)))


def test_the_lint_the_bench_and_the_own_loop_read_its_declared_traits(installed):
    assert "counting-batches" in codes()  # a recipe's train.lint_ignore may name it
    summary = tiny_trainer({NAME: {}}).fit()
    assert [f["fix"] for f in summary["lint"] if f["code"] == "counting-batches"] == [
        "remove `speedups.count_batches`."
    ]
    figures = {"seconds": 1.5, "graph_breaks": 0, "recompiles": 2}
    assert compile_figures({NAME: figures}) == {
        "compile_s": 1.5,
        "graph_breaks": 0,
        "recompiles": 2,
    }
    eng = accel.Engine(speedups={NAME: {}}, device="cpu")
    model = torch.nn.Linear(2, 2)
    with pytest.raises(AccelError, match=f"`speedups.{NAME}` would compile it again"):
        eng.setup(torch.compile(model), torch.optim.SGD(model.parameters(), lr=0.1))


def test_the_conflict_rule_refuses_it_for_the_runs_own_choices(installed):
    trainer = tiny_trainer({NAME: {}}, train={"grad_accum": 2})
    with pytest.raises(AccelError, match=f"`speedups.{NAME}`: counts optimizer steps, not micro-batches"):
        trainer.fit()
