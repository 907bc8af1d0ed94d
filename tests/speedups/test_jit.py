"""The `jit` speed-up: script or trace, right in both modes, said deprecated once, never stacked with compile."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from torch import nn

import accel.speedups.jit as jit_module
from accel.callbacks import Callback
from accel.config.recipe import validate_recipe
from accel.errors import AccelError
from accel.speedups.jit import Jit, TracedPerMode, apply_jit
from accel.train.run import build_trainer


class Recorder(Callback):
    def __init__(self):
        self.model = None

    def on_fit_start(self, trainer):
        self.model = trainer.model


def fit_tiny(tiny, speedups):
    recorder = Recorder()
    trainer = build_trainer(validate_recipe({**tiny, "speedups": speedups}), extra_callbacks=[recorder])
    return trainer, trainer.fit(), recorder.model


class Unscriptable(nn.Module):
    """TorchScript rejects lambdas; tracing only records the ops they run."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, x):
        return (lambda y: self.linear(y) * 2)(x)


def test_script_trains_like_eager(tiny):
    _, plain, _ = fit_tiny(tiny, {})
    trainer, summary, model = fit_tiny(tiny, {"jit": {}})
    assert isinstance(model, torch.jit.ScriptModule)
    assert summary["metrics"] == pytest.approx(plain["metrics"], rel=1e-5)
    assert trainer.model is trainer.module  # teardown hands the plain module back


@pytest.mark.slow
def test_trace_keeps_train_and_eval_apart(tiny):
    _, plain, _ = fit_tiny(tiny, {})
    trainer, summary, model = fit_tiny(tiny, {"jit": {"method": "trace"}})
    assert isinstance(model, TracedPerMode) and set(model.traces) == {True, False}
    # equal to eager also means tracing did not update BatchNorm statistics an extra time
    assert summary["metrics"] == pytest.approx(plain["metrics"], rel=1e-6)
    x = torch.randn(5, *tiny["data"]["dataset"]["shape"])
    module = trainer.module.eval()
    with torch.no_grad():
        assert torch.allclose(model.traces[False](x), module(x), atol=1e-6)
        # the train-mode trace normalises with batch statistics: one trace could not have served both modes
        assert not torch.allclose(model.traces[True](x), module(x), atol=1e-3)


def test_trace_takes_what_script_rejects():
    model = Unscriptable()
    with pytest.raises(AccelError, match="method: trace"):
        apply_jit(model, "script")
    traced = apply_jit(model, "trace")
    x = torch.randn(3, 4)
    assert torch.equal(traced(x), model(x))


def test_jit_and_compile_together_is_a_clear_error(tiny):
    trainer = build_trainer(validate_recipe({**tiny, "speedups": {"jit": {}, "compile": {"backend": "eager"}}}))
    with pytest.raises(AccelError, match="`jit` and `compile`"):
        trainer.fit()
    assert trainer.model is trainer.module


def test_deprecation_is_said_once(tiny, caplog, monkeypatch):
    monkeypatch.setattr(jit_module, "_deprecation_said", False)
    tiny["train"] = {"max_steps": 1}
    with caplog.at_level(logging.WARNING, logger="accel"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_tiny(tiny, {"jit": {}})
        fit_tiny(tiny, {"jit": {"method": "trace"}})
    said = [m for m in caplog.messages if m.startswith("jit:") and "deprecated upstream" in m]
    assert len(said) == 1 and "speedups.compile" in said[0] and "torch.export" in said[0]  # what to use instead
    assert not [w for w in caught if issubclass(w.category, FutureWarning) and "torch.jit" in str(w.message)]


def test_the_lint_names_it_with_compile_as_the_fix(tiny):
    trainer, summary, _ = fit_tiny({**tiny, "train": {"max_steps": 1}}, {"jit": {}})
    found = {f["code"]: f for f in summary["lint"]}
    assert "speedups: {compile: {}}" in found["torchscript"]["fix"]


def test_tune_never_picks_it(tiny):
    from accel.bench.knobs import build_knobs

    base = validate_recipe({**tiny, "speedups": {}})
    keys = {k.key for k in build_knobs(base, speedups=True) if k.speedup}
    assert "speedups.compile" in keys and not any("jit" in key for key in keys)


def test_default_config_scripts():
    assert Jit.Config().method == "script"
