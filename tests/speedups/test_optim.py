"""optim: the optimizer switched in place to fused / foreach kernels, with its schedule and state intact."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from accel.callbacks import Callback
from accel.errors import AccelError
from accel.optimizers.traits import optimizer_traits
from accel.speedups import Context, RunFacts
from accel.speedups.channels_last import ChannelsLast
from accel.speedups.optim import Optim, choose_impl, set_implementation
from accel.train.trainer import Trainer

CPU = torch.device("cpu")

FLAGS = {"fused": (True, False), "foreach": (False, True), "for_loop": (False, False)}


class TorchCalls(TorchFunctionMode):
    """Records the name of every torch function called inside it (the optimizer kernels among them)."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.add(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def ops_called(trainer) -> set[str]:
    """Fit `trainer`; the names of the torch functions that ran."""
    with TorchCalls() as calls:
        trainer.fit()
    return calls.names


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
@pytest.mark.parametrize("impl", ["fused", "foreach", "for_loop"])
def test_each_implementation_runs_its_own_kernels_on_the_same_optimizer(make_trainer, impl, optimizer):
    trainer = make_trainer({"optim": {"impl": impl}}, optim={"name": optimizer})
    original, params = trainer.optimizer, list(trainer.module.parameters())
    ops = ops_called(trainer)
    assert trainer.optimizer is original
    held = [p for group in trainer.optimizer.param_groups for p in group["params"]]  # AdamW: 1-D ones in a group
    assert len(held) == len(params) and {id(p) for p in held} == {id(p) for p in params}
    assert all((group["fused"], group["foreach"]) == FLAGS[impl] for group in trainer.optimizer.param_groups)
    fused = any(name.startswith("_fused_") for name in ops)
    foreach = any(name.startswith("_foreach_") for name in ops)  # fused adamw counts its steps with one
    kernels = sorted(name for name in ops if "fused" in name or "foreach" in name)
    assert fused == FLAGS[impl][0] and (foreach or fused) == any(FLAGS[impl]), kernels


@pytest.mark.parametrize("impl", ["fused", "foreach"])
def test_every_implementation_computes_the_same_update(make_trainer, impl):
    reference, other = make_trainer({"optim": {"impl": "for_loop"}}), make_trainer({"optim": {"impl": impl}})
    start = [p.detach().clone() for p in reference.module.parameters()]
    reference.fit(), other.fit()
    assert any(not torch.equal(a, b) for a, b in zip(start, reference.module.parameters()))
    for a, b in zip(reference.module.parameters(), other.module.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


class LearningRates(Callback):
    def __init__(self):
        self.lrs: list[float] = []

    def on_batch_end(self, trainer, info) -> None:
        self.lrs.append(trainer.optimizer.param_groups[0]["lr"])


def test_the_lr_schedule_still_drives_the_switched_optimizer(make_trainer):
    runs = []
    for speedups in ({}, {"optim": {"impl": "fused"}}):
        trainer = make_trainer(speedups, schedule={"name": "cosine"}, train={"max_steps": 4})
        seen = LearningRates()
        trainer.callbacks.append(seen)
        trainer.fit()
        runs.append(seen.lrs)
    assert len(set(runs[0])) == 4, "cosine decay changes the lr every step"
    assert runs[1] == runs[0]


def test_auto_picks_fused_where_this_torch_has_it_and_leaves_the_rest_alone():
    weight = nn.Parameter(torch.zeros(3))
    assert choose_impl(torch.optim.AdamW([weight]), "auto") == "fused"  # adamw and sgd have CPU kernels
    assert choose_impl(torch.optim.SGD([weight], lr=0.1), "auto") == "fused"
    assert choose_impl(torch.optim.RMSprop([weight]), "auto") is None  # no fused RMSprop: torch's default stays
    assert choose_impl(torch.optim.RMSprop([weight]), "foreach") == "foreach"


class NoFusedKernelHere(torch.optim.SGD):
    """Accepts `fused` but, like a fused optimizer on an unsupported device, fails when it steps."""

    def step(self, closure=None):
        if self.param_groups[0]["fused"]:
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
        return super().step(closure)


def test_an_impossible_request_is_refused_by_the_conflict_rule_with_what_to_use():
    weight = nn.Parameter(torch.zeros(3))
    no_kernel = optimizer_traits(NoFusedKernelHere([weight], lr=0.1))
    assert no_kernel.fused is False and no_kernel.foreach
    fused, foreach = Optim(Optim.Config(impl="fused")), Optim(Optim.Config(impl="foreach"))
    assert "NoFusedKernelHere has no fused kernel" in fused.conflict(Context(CPU, run=RunFacts(optimizer=no_kernel)))
    assert "use `impl: auto`" in fused.conflict(Context(CPU, run=RunFacts(optimizer=no_kernel)))
    assert foreach.conflict(Context(CPU, run=RunFacts(optimizer=no_kernel))) is None
    lbfgs = optimizer_traits(torch.optim.LBFGS([weight]))
    assert "LBFGS has no foreach implementation" in foreach.conflict(Context(CPU, run=RunFacts(optimizer=lbfgs)))
    assert fused.conflict(Context(CPU)) is None  # no optimizer known (tune before its probe): nothing to judge
    unknown = RunFacts(optimizer=replace(no_kernel, optimizer=None))  # tune's stand-in off the run's device
    assert fused.conflict(Context(CPU, run=unknown)) is None
    with pytest.raises(AccelError, match="no fused kernel.*impl: auto"):  # a direct call says the same
        set_implementation(NoFusedKernelHere([weight], lr=0.1), "fused")


def test_a_trainer_asking_for_a_missing_kernel_is_refused_before_any_setup(make_trainer, monkeypatch):
    built = make_trainer({})
    trainer = Trainer(
        built.module,
        torch.optim.RMSprop(built.module.parameters(), lr=0.01),  # no fused RMSprop in torch
        built.train_loader,
        task=built.task,
        speedups=[Optim(Optim.Config(impl="fused")), ChannelsLast()],
        device="cpu",
    )
    set_up = []
    monkeypatch.setattr(Optim, "setup", lambda self, engine: set_up.append(self.name))
    monkeypatch.setattr(ChannelsLast, "setup", lambda self, engine: set_up.append(self.name))
    with pytest.raises(AccelError) as err:
        trainer.fit()
    lines = str(err.value).splitlines()
    assert lines[0] == "these speed-ups cannot run with the recipe's other choices:"
    assert lines[1].startswith("  - `speedups.optim`: RMSprop has no fused kernel for its parameters here")
    assert lines[-1] == "Disable them (`--set speedups.NAME.enabled=false`)."
    assert set_up == []  # refused before the first speed-up was set up


def test_switching_keeps_resumed_state_and_the_grad_scaler_contract():
    weight = nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([weight], lr=0.1)
    weight.grad = torch.ones(3)
    optimizer.step()  # state exists, as after loading a checkpoint
    moments = optimizer.state[weight]["exp_avg"]
    set_implementation(optimizer, "fused")
    assert optimizer.state[weight]["exp_avg"] is moments
    assert optimizer._step_supports_amp_scaling  # GradScaler hands a fused optimizer its found-inf flag
    optimizer.step()
    set_implementation(optimizer, "for_loop")
    assert not getattr(optimizer, "_step_supports_amp_scaling", False)
    optimizer.step()
    assert int(optimizer.state[weight]["step"]) == 3
