"""The `compiled_optimizer` speed-up: the compiled step trains like the eager one, compiles once whatever the
schedule does, goes through the GradScaler and checkpoints, and puts the optimizer back.

Most tests use backend="aot_eager": dynamo traces the step as inductor would see it (tensor learning rates, the
optimizer's compiling code paths) without seconds of C++ generation; one slow test runs inductor.
"""

from __future__ import annotations

import io
from contextlib import nullcontext

import pytest
import torch

from accel.callbacks import Callback
from accel.config.recipe import validate_recipe
from accel.speedups import Context
from accel.speedups.compiled_optimizer import CompiledOptimizer, tensor_lrs

from .conftest import RECIPE, tiny_trainer, weights

TRACED = {"backend": "aot_eager"}
STEPS = 6
SCHEDULES = {
    "cosine": {"name": "cosine", "warmup_steps": 2},
    "onecycle": {"name": "onecycle"},
}
OPTIMIZERS = {"adamw": {"name": "adamw", "lr": 1e-2}, "sgd": {"name": "sgd", "lr": 0.05}}
# Compiled, Adam computes its bias corrections from the float32 step tensor, eager from Python doubles: a plain
# torch.compile(optimizer.step) differs from eager by as much (about 5e-7 after 6 steps on a 16-wide MLP), and
# the tensor lr adds about 1e-8 to that. SGD has no such term.
ATOL = {"adamw": 1e-5, "sgd": 1e-6}


def assert_same_weights(a, b, optim="adamw"):
    for x, y in zip(weights(a), weights(b), strict=True):
        torch.testing.assert_close(y, x, rtol=1e-6, atol=ATOL[optim])


def fitted(speedups, optim="adamw", schedule="cosine", **train):
    """A tiny run of STEPS steps, two micro-batches each, its gradient norm clipped."""
    trainer = tiny_trainer(
        speedups,
        optim=OPTIMIZERS[optim],
        schedule=SCHEDULES[schedule],
        train={"max_steps": STEPS, "grad_accum": 2, "clip_grad_norm": 0.5, **train},
    )
    return trainer, trainer.fit()


class Lrs(Callback):
    """The learning rate at the end of each batch, as the trainer logs it."""

    def __init__(self):
        self.seen = []

    def on_batch_end(self, trainer, info):
        self.seen.append(trainer.optimizer.param_groups[0]["lr"])


@pytest.mark.slow
@pytest.mark.parametrize("optim, schedule", [("adamw", "cosine"), ("sgd", "onecycle")])
def test_compiled_step_trains_like_the_eager_step_and_does_not_recompile(optim, schedule):
    eager, _ = fitted({}, optim, schedule)
    compiled, summary = fitted({"compiled_optimizer": TRACED}, optim, schedule)
    assert summary["speedups"] == ["compiled_optimizer"]
    assert_same_weights(eager, compiled, optim)
    # six learning rates, no graph after the first two steps: the lr is an input, not a constant of the graph
    metrics = summary["speedup_metrics"]["compiled_optimizer"]
    assert metrics["graphs"] >= 1 and metrics["late_graphs"] == 0
    assert eager.optimizer.param_groups[0]["lr"] == compiled.optimizer.param_groups[0]["lr"]  # the same floats


@pytest.mark.slow
def test_a_float_lr_would_recompile_every_step(monkeypatch, caplog):
    """What the tensor learning rates prevent: with the floats left in place, each new lr is a new constant."""
    monkeypatch.setattr("accel.speedups.compiled_optimizer.tensor_lrs", lambda groups, lrs: nullcontext())
    _, summary = fitted({"compiled_optimizer": TRACED}, "sgd", "onecycle")
    assert summary["speedup_metrics"]["compiled_optimizer"]["late_graphs"] >= 1
    assert "compiled again" in caplog.text


@pytest.mark.slow
def test_the_schedule_and_the_logged_lr_stay_python_floats():
    trainer = tiny_trainer({"compiled_optimizer": TRACED}, schedule=SCHEDULES["cosine"], train={"max_steps": 3})
    lrs = Lrs()
    trainer.callbacks.append(lrs)
    trainer.fit()
    assert len(set(lrs.seen)) == 3 and all(type(lr) is float for lr in lrs.seen)
    assert all(type(v) is float for v in trainer.scheduler.state_dict()["_last_lr"])


@pytest.mark.slow
def test_the_compiled_step_runs_inside_the_grad_scalers_step(monkeypatch):
    """fp16 with torch's CPU GradScaler: scaler.step checks for infs on the host, then calls optimizer.step(),
    the compiled one. (accel runs fp16 on CUDA only; here the device check is told the CPU has a scaler.)
    SGD, to 1e-5: AdamW's 1e-7 compiled-vs-eager difference flips fp16 roundings in the next forward, and Adam's
    normalised update turns those into differences of lr size; SGD's differ in the last bit (the compiled step
    multiplies by the tensor lr, then adds), which fp16 forwards grow to about 1e-6."""
    monkeypatch.setattr("accel.devices.supports_fp16_scaler", lambda device: True)
    amp = {"amp": {"dtype": "fp16"}}
    eager, _ = fitted(amp, "sgd", "onecycle")
    compiled, summary = fitted({**amp, "compiled_optimizer": TRACED}, "sgd", "onecycle")
    assert summary["speedup_metrics"]["compiled_optimizer"]["late_graphs"] == 0
    assert summary["speedup_metrics"]["amp"]["skipped_steps"] == 0
    for a, b in zip(weights(eager), weights(compiled), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-5)


@pytest.mark.slow
def test_fused_adamw_compiles_too():
    fused = {"optim": {"impl": "fused"}}
    eager, _ = fitted(fused)
    compiled, summary = fitted({**fused, "compiled_optimizer": TRACED})
    assert summary["speedup_metrics"]["optim"]["impl"] == "fused"
    assert_same_weights(eager, compiled)


def test_foreach_kernels_are_refused_with_the_reason():
    from accel.errors import AccelError

    with pytest.raises(AccelError, match=r"speedups.compiled_optimizer.*foreach.*tensor learning rate"):
        fitted({"optim": {"impl": "foreach"}, "compiled_optimizer": TRACED})


@pytest.mark.slow
def test_resume_continues_exactly_and_checkpoints_hold_float_lrs():
    sections = {"schedule": SCHEDULES["onecycle"], "train": {"max_steps": 4}}
    whole = tiny_trainer({"compiled_optimizer": TRACED}, **sections)
    whole.fit()
    first = tiny_trainer({"compiled_optimizer": TRACED}, **{**sections, "train": {"max_steps": 2}})
    first.fit()
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert all(type(g["lr"]) is float for g in state["optimizer"]["param_groups"])  # as an eager run writes
    resumed = tiny_trainer({"compiled_optimizer": TRACED}, **sections)
    resumed.load_state_dict(state)
    resumed.fit()
    assert resumed.step == whole.step == 4
    assert all(torch.equal(a, b) for a, b in zip(weights(whole), weights(resumed)))  # compiled both ways: exact


@pytest.mark.slow
def test_teardown_puts_the_optimizers_own_step_back():
    trainer = tiny_trainer({"compiled_optimizer": TRACED})  # no schedule: step is the class's method
    trainer.fit()
    assert "step" not in vars(trainer.optimizer)
    scheduled = tiny_trainer({"compiled_optimizer": TRACED}, schedule=SCHEDULES["cosine"])
    wrapped = scheduled.optimizer.step  # the LRScheduler's wrapper
    scheduled.fit()
    assert scheduled.optimizer.step is wrapped


def test_tensor_lrs_swaps_in_and_restores_floats():
    groups = [{"lr": 0.5}, {"lr": torch.tensor(0.25)}]
    tensors = [torch.zeros((), dtype=torch.float64) for _ in groups]
    with tensor_lrs(groups, tensors):
        assert groups[0]["lr"] is tensors[0] and float(tensors[0]) == 0.5
        assert float(groups[1]["lr"]) == 0.25 and groups[1]["lr"] is not tensors[1]  # a tensor lr is kept
    assert groups[0]["lr"] == 0.5 and type(groups[0]["lr"]) is float
    with tensor_lrs(groups, tensors, fill=False):  # a CUDA graph capture: the tensor is filled outside it
        assert groups[0]["lr"] is tensors[0] and float(tensors[0]) == 0.5
    tensors[0].zero_()
    with tensor_lrs(groups, tensors, fill=False):
        assert float(groups[0]["lr"]) == 0.0


def test_refusals_name_their_reason():
    cpu = Context(torch.device("cpu"))
    assert CompiledOptimizer().conflict(cpu) is None
    assert "sharded" in CompiledOptimizer().conflict(Context(torch.device("cpu"), strategy="fsdp"))


def test_an_unknown_backend_names_the_key():
    from accel.errors import RecipeError

    with pytest.raises(RecipeError, match="speedups.compiled_optimizer.backend") as err:
        validate_recipe({**RECIPE, "speedups": {"compiled_optimizer": {"backend": "inductr"}}})
    assert "did you mean `inductor`" in str(err.value)


@pytest.mark.slow
def test_inductor_compiles_the_step_once():
    eager, _ = fitted({})
    compiled, summary = fitted({"compiled_optimizer": {}})
    metrics = summary["speedup_metrics"]["compiled_optimizer"]
    assert metrics["late_graphs"] == 0 and metrics["compile_s"] > 0
    assert_same_weights(eager, compiled)
