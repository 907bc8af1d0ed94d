"""The `ema` speed-up: the average follows the applied optimizer steps, evaluates, checkpoints and unhooks."""

from __future__ import annotations

import io

import pytest
import torch

from accel.config.recipe import validate_recipe
from accel.speedups import Speedup
from accel.speedups.ema import Ema, decay_at, live_tensors, update_ema
from accel.train.run import build_trainer


def tiny_trainer(tiny, ema: dict | None = None, **train):
    speedups = {} if ema is None else {"ema": ema}
    return build_trainer(validate_recipe({**tiny, "speedups": speedups, "train": {"epochs": 2, **train}}))


def ema_of(trainer) -> Ema:
    return next(s for s in trainer.speedups if s.name == "ema")


def states_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_update_math():
    shadow = {"w": torch.zeros(3), "n": torch.tensor(0)}
    live = {"w": torch.ones(3), "n": torch.tensor(7)}
    update_ema(shadow, live, decay=0.9)
    assert torch.allclose(shadow["w"], torch.full((3,), 0.1))
    assert shadow["n"].item() == 7  # integer counters are copied, not averaged
    update_ema(shadow, live, decay=0.9)
    assert torch.allclose(shadow["w"], torch.full((3,), 0.19))


def test_warmup_decay():
    assert decay_at(0.999, 0, warmup=True) == pytest.approx(0.1)
    assert decay_at(0.999, 10**6, warmup=True) == 0.999
    assert decay_at(0.999, 0, warmup=False) == 0.999


def test_average_follows_every_applied_step(tiny):
    trainer = tiny_trainer(tiny, {"decay": 0.0, "warmup": False})  # decay 0: the average is the latest weights
    summary = trainer.fit()
    ema = ema_of(trainer)
    assert ema.updates == summary["steps"] == 6
    assert states_equal(ema.shadow, {k: v.detach() for k, v in live_tensors(trainer.module).items()})


def test_decay_one_keeps_the_initial_weights_and_every_steps_thins_updates(tiny):
    trainer = tiny_trainer(tiny, {"decay": 1.0, "warmup": False, "every_steps": 4})
    initial = {k: v.clone() for k, v in trainer.module.state_dict().items()}
    trainer.fit()
    ema = ema_of(trainer)
    assert ema.updates == 1  # 6 steps, one update every 4
    floats = [k for k, v in initial.items() if v.is_floating_point()]
    assert all(torch.equal(ema.shadow[k], initial[k]) for k in floats)
    assert not all(torch.equal(trainer.module.state_dict()[k], initial[k]) for k in floats)  # training moved on


def test_eval_context_swaps_in_the_average_and_restores(tiny):
    trainer = tiny_trainer(tiny, {"decay": 1.0, "warmup": False})
    trainer.fit()
    ema, trained = ema_of(trainer), {k: v.clone() for k, v in trainer.module.state_dict().items()}
    with ema.eval_context():
        assert states_equal(trainer.module.state_dict(), ema.shadow)
    assert states_equal(trainer.module.state_dict(), trained)


@pytest.mark.skipif(
    not hasattr(Speedup, "eval_context"),
    reason="the trainer has no eval_context hook yet (proposed diff to trainer.py / base.py)",
)
def test_evaluation_uses_the_average(tiny):
    untrained = tiny_trainer(tiny).evaluate()
    summary = tiny_trainer(tiny, {"decay": 1.0, "warmup": False}).fit()  # average == initial weights
    plain = tiny_trainer(tiny).fit()
    assert summary["metrics"]["val_loss"] == pytest.approx(untrained["val_loss"], rel=1e-6)
    assert plain["metrics"]["val_loss"] != pytest.approx(untrained["val_loss"], rel=1e-3)


def test_state_survives_a_checkpoint_and_a_resume(tiny):
    trainer = tiny_trainer(tiny, {"decay": 0.5})
    trainer.fit()
    saved = ema_of(trainer).state_dict()
    buffer = io.BytesIO()
    torch.save(trainer.state_dict(), buffer)  # the whole checkpoint, as the Checkpointer writes it
    buffer.seek(0)
    checkpoint = torch.load(buffer, weights_only=True)
    resumed = tiny_trainer(tiny, {"decay": 0.5}, max_steps=1)
    resumed.load_state_dict(checkpoint)  # as `--resume` does: before fit, so before the speed-up's setup
    resumed.fit()
    ema = ema_of(resumed)
    assert ema.updates == saved["updates"] == 6  # max_steps=1 was already spent: no new update
    assert states_equal(ema.shadow, saved["shadow"])
    assert not states_equal(ema.shadow, {k: v.detach() for k, v in live_tensors(resumed.module).items()})


def test_teardown_unhooks_the_optimizer(tiny):
    trainer = tiny_trainer(tiny, {"decay": 0.0, "warmup": False})
    trainer.fit()
    ema = ema_of(trainer)
    before = {k: v.clone() for k, v in ema.shadow.items()}
    trainer.module(torch.randn(4, *tiny["data"]["dataset"]["shape"])).sum().backward()
    trainer.optimizer.step()
    assert ema.updates == 6 and states_equal(ema.shadow, before)


def test_default_config_is_valid():
    cfg = Ema.Config()
    assert 0 < cfg.decay < 1 and cfg.every_steps == 1 and cfg.evaluate
