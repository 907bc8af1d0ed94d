"""The contract every registered speed-up keeps, checked for each one (a new module is covered automatically)."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from accel.callbacks import Callback
from accel.config.recipe import validate_recipe
from accel.errors import RecipeError
from accel.registry import SPEEDUPS
from accel.speedups import Context, Phase, Speedup, SpeedupConfig
from accel.train.trainer import Trainer

from .conftest import RECIPE, global_state, tiny_trainer, weights

# A minimal valid config per speed-up, chosen so the speed-up does something on a CPU, quickly. Default: {}.
CONFIGS: dict[str, dict[str, Any]] = {
    "amp": {"dtype": "bf16"},
    "cudnn": {"float32_matmul_precision": "medium"},  # the one cudnn flag that changes CPU matmuls
    "threads": {"intra_op": 2},  # the fixture below starts from 1 thread, so this is a change to undo
    "compile": {"backend": "eager"},  # traces and guards like inductor, without seconds of code generation
    "compiled_optimizer": {"backend": "aot_eager"},  # the same, for the optimizer step
}
NAMES = SPEEDUPS.names()


def config(name: str) -> dict[str, Any]:
    return dict(CONFIGS.get(name, {}))


def test_the_registry_holds_this_teams_speedups():
    assert {"amp", "cudnn", "channels_last", "threads", "optim"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_class_and_config_are_documented(name):
    cls = SPEEDUPS.get(name)
    assert issubclass(cls, Speedup) and cls.name == name
    assert cls.__doc__ and cls.__doc__.strip().splitlines()[0], "the first docstring line is `accel speedups`' line"
    assert issubclass(cls.Config, SpeedupConfig)
    undocumented = [field for field, info in cls.Config.model_fields.items() if not info.description]
    assert not undocumented, f"{name}: fields without a description: {undocumented}"
    reason = cls().conflict(Context(torch.device("cpu")))  # what `accel speedups` asks of a default instance
    assert reason is None or (isinstance(reason, str) and reason)
    assert isinstance(cls.phase, Phase) and cls.phase is not Phase.WRAP, "WRAP is the strategy's phase"


@pytest.mark.parametrize("name", NAMES)
def test_config_round_trips_and_rejects_misspelt_options(name):
    cfg = SPEEDUPS.get(name).Config(**config(name))
    assert type(cfg).model_validate(cfg.model_dump()) == cfg
    with pytest.raises(ValidationError):
        SPEEDUPS.get(name).Config(enabeld=True)
    with pytest.raises(RecipeError, match=rf"speedups\.{name}\.enabeld.*did you mean `enabled`"):
        validate_recipe({**RECIPE, "speedups": {name: {"enabeld": False}}})


@dataclass
class Fitted:
    """One speed-up's two-step run, shared by the tests that only read it (fits are the slow part)."""

    trainer: Trainer
    summary: dict[str, Any]
    before: dict[str, Any]  # global_state() before the trainer was built and after fit() returned
    after: dict[str, Any]


@pytest.fixture(scope="module")
def fitted():
    runs: dict[str, Fitted] = {}

    def run(name: str) -> Fitted:
        if name not in runs:
            runs[name] = _fit_from_unusual_globals(name)
        return runs[name]

    return run


def _fit_from_unusual_globals(name: str) -> Fitted:
    """Start from settings no speed-up asks for, so a restored value is not a coincidence of defaults."""
    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    torch.set_num_threads(1)
    torch.set_float32_matmul_precision("highest")
    try:
        before = global_state()
        trainer = tiny_trainer({name: config(name)})
        summary = trainer.fit()
        return Fitted(trainer, summary, before, global_state())
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(precision)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_two_steps_give_a_finite_loss(name, fitted):
    summary = fitted(name).summary
    assert summary["status"] == "completed" and summary["steps"] == 2
    assert math.isfinite(summary["metrics"]["train_loss"])
    assert name in summary["speedups"] or summary["skipped_speedups"].get(name), "neither active nor skipped"


@pytest.mark.parametrize("name", NAMES)
def test_teardown_restores_global_state(name, fitted):
    run = fitted(name)
    changed = {key: (run.before[key], run.after[key]) for key in run.before if run.before[key] != run.after[key]}
    assert not changed, f"{name} left global state changed: {changed}"


@pytest.fixture(scope="module")
def absent_weights() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Weights before and after two steps with no speed-up listed."""
    trainer = tiny_trainer({})
    start = weights(trainer)
    trainer.fit()
    return start, weights(trainer)


@pytest.mark.parametrize("name", NAMES)
def test_disabled_equals_absent(name, absent_weights):
    start, after = absent_weights
    assert any(not torch.equal(a, b) for a, b in zip(start, after)), "training must move the weights"
    disabled = tiny_trainer({name: {**config(name), "enabled": False}})
    assert not disabled.speedups
    disabled.fit()
    for a, b in zip(after, weights(disabled)):
        assert torch.equal(a, b)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


@pytest.mark.parametrize("name", NAMES)
def test_state_survives_a_checkpoint_round_trip(name, fitted):
    first = fitted(name).trainer
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)  # as accel.runs.checkpoint reads checkpoints
    saved = {s.name: s.state_dict() for s in first.speedups}
    assert _same(loaded["speedups"], saved)
    resumed = tiny_trainer({name: config(name)})  # resume: state is loaded before fit() runs setup
    resumed.load_state_dict(loaded)
    summary = resumed.fit()  # the step budget is already spent: setup, evaluation, teardown
    assert summary["steps"] == 2
    assert _same({s.name: s.state_dict() for s in resumed.speedups}, saved)


class StopAt(Callback):
    """Stops the run after optimizer step `step`, as SIGTERM would."""

    def __init__(self, step: int):
        self.step = step

    def on_batch_end(self, trainer, info) -> None:
        if trainer.step == self.step:
            trainer.stop_signal = 15


def test_our_speedups_stacked_resume_to_exactly_the_uninterrupted_run():
    stacked = {name: config(name) for name in ("threads", "cudnn", "channels_last", "optim", "amp")}
    sections = {"schedule": {"name": "onecycle"}, "train": {"max_steps": None, "epochs": 2}}
    whole = tiny_trainer(stacked, **sections)
    whole.fit()
    first = tiny_trainer(stacked, **sections)
    first.callbacks.append(StopAt(3))  # 4 steps per epoch: stops inside the first epoch
    assert first.fit()["status"] == "interrupted"
    resumed = tiny_trainer(stacked, **sections)
    resumed.load_state_dict(first.state_dict())
    resumed.fit()
    assert resumed.step == whole.step == 8
    assert all(torch.equal(a, b) for a, b in zip(weights(whole), weights(resumed)))
