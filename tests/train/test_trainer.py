"""The loop: budgets, accumulation, clipping, evaluation, checkpoints and resuming mid-epoch."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Trainer
from accel.callbacks import Callback, EarlyStopping
from accel.config.recipe import validate_recipe
from accel.errors import AccelError, CheckpointError
from accel.runs.records import EpochRecord
from accel.strategy import Strategy
from accel.train.run import build_trainer


def _weights(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.module.parameters()]


@pytest.mark.slow
def test_fit_learns_and_reports_the_summary_contract(tiny):
    tiny["train"]["epochs"] = 6
    tiny["data"]["dataset"]["num_samples"] = 256
    summary = build_trainer(validate_recipe(tiny)).fit()
    assert summary["status"] == "completed"
    assert set(summary["metrics"]) == {"val_accuracy", "val_loss", "train_loss"}
    assert summary["metrics"]["val_accuracy"] > 0.5  # 4 classes: chance is 0.25
    assert summary["epochs"] == 6 and summary["steps"] == 6 * (205 // 16)
    assert summary["samples_per_s"] > 0 and 0 <= summary["data_wait_fraction"] < 1
    assert summary["device"].startswith("cpu")


def test_max_steps_stops_mid_epoch_and_still_evaluates(tiny):
    tiny["train"] = {"epochs": 10, "max_steps": 5}
    summary = build_trainer(validate_recipe(tiny)).fit()
    assert summary["steps"] == 5 and summary["epochs"] == 1.667  # 3 steps an epoch: one whole, 2 of the next
    assert summary["metrics"]["val_accuracy"] is not None


def _linear_trainer(batch_size: int, grad_accum: int, strategy: Strategy | None = None, **train) -> Trainer:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 6), torch.randint(0, 3, (32,)))
    model = nn.Linear(6, 3)
    loader = DataLoader(data, batch_size=batch_size)  # fixed order: accumulation must not change the maths
    return Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.5),
        loader,
        device="cpu",
        config=validate_recipe({**_TINY_SHELL, "train": {"epochs": 1, "grad_accum": grad_accum, **train}}).train,
        strategy=strategy,
    )


_TINY_SHELL = {"model": {"name": "small_cnn"}, "data": {"dataset": {"name": "digits"}}, "optim": {"name": "sgd"}}


def test_gradient_accumulation_matches_one_big_batch():
    big, micro = _linear_trainer(16, 1), _linear_trainer(4, 4)
    big.fit(), micro.fit()
    assert big.step == micro.step == 2
    for a, b in zip(_weights(big), _weights(micro)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_accumulation_skips_gradient_sync_on_non_final_micro_batches():
    calls = []

    class RecordingStrategy(Strategy):  # what matters is when the trainer asks the strategy not to sync
        def no_sync(self, module):
            calls.append(trainer.batch_in_epoch)
            return nullcontext()

    trainer = _linear_trainer(4, 4, strategy=RecordingStrategy())
    trainer.fit()
    assert calls == [1, 2, 3, 5, 6, 7]  # every micro-batch except each 4th, which steps and syncs


def test_gradients_are_clipped_before_the_step():
    trainer = _linear_trainer(16, 1, clip_grad_norm=0.01)
    norms = []
    step = trainer.optimizer.step

    def recording_step(*args, **kwargs):
        norms.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in trainer.module.parameters()])))
        return step(*args, **kwargs)

    trainer.optimizer.step = recording_step
    trainer.fit()
    assert norms and all(n <= 0.01 + 1e-6 for n in norms)


def test_early_stopping_stops_when_the_metric_stalls(tiny):
    tiny["train"] = {"epochs": 20, "early_stopping": {"monitor": "val_loss", "patience": 1, "min_delta": 100.0}}
    summary = build_trainer(validate_recipe(tiny)).fit()
    assert summary["epochs"] == 2  # epoch 1 sets the best, epoch 2 fails to beat it by 100


EPOCH_FIGURES = {"lr": 0.1, "train_loss": 1.0, "samples_per_s": 100.0, "data_wait_fraction": 0.0}


def test_early_stopping_tracks_max_mode():
    stopper = EarlyStopping(monitor="val_accuracy", mode="max", patience=2)

    class Stub:
        should_stop = False

    stub = Stub()
    for epoch, value in enumerate((0.5, 0.6, 0.6, 0.59), 1):
        record = EpochRecord(epoch=epoch, step=epoch, metrics={"val_accuracy": value}, **EPOCH_FIGURES)
        stopper.on_epoch_end(stub, record)
    assert stopper.best == 0.6 and stub.should_stop


def test_early_stopping_names_a_monitor_the_task_does_not_report_at_the_first_evaluated_epoch():
    stopper = EarlyStopping(monitor="val_acc", mode="max")
    stopper.on_epoch_end(None, EpochRecord(epoch=1, step=3, **EPOCH_FIGURES))  # not evaluated: nothing to say
    evaluated = EpochRecord(epoch=2, step=6, metrics={"val_loss": 0.5, "val_accuracy": 0.8}, **EPOCH_FIGURES)
    with pytest.raises(AccelError, match=r"`val_acc` is not a metric of this run's task \(did you mean `val_accuracy`"):
        stopper.on_epoch_end(None, evaluated)
    with pytest.raises(AccelError, match="Its metrics: val_loss, val_accuracy, train_loss."):
        stopper.on_epoch_end(None, evaluated)
    train = EarlyStopping(monitor="train_loss", patience=1)  # a field of the record, not a task metric, is found too
    train.on_epoch_end(None, evaluated)
    assert train.best == 1.0


class StopAt(Callback):
    """Simulates SIGTERM arriving during step `step`."""

    def __init__(self, step: int):
        self.step = step

    def on_batch_end(self, trainer, info):
        if trainer.step == self.step:
            trainer.stop_signal = 15


def test_resume_mid_epoch_equals_an_uninterrupted_run(tiny):
    tiny["train"]["epochs"] = 3
    tiny["schedule"] = {"name": "onecycle"}
    recipe = validate_recipe(tiny)
    whole = build_trainer(recipe)
    whole_summary = whole.fit()

    first = build_trainer(recipe, extra_callbacks=[StopAt(5)])  # 3 steps per epoch: stops inside epoch 2
    assert first.fit()["status"] == "interrupted" and first.batch_in_epoch == 2
    state = first.state_dict()
    second = build_trainer(recipe)
    second.load_state_dict(state)
    resumed_summary = second.fit()
    for a, b in zip(_weights(whole), _weights(second)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert resumed_summary["metrics"]["val_loss"] == whole_summary["metrics"]["val_loss"]
    assert resumed_summary["steps"] == whole_summary["steps"]


def test_checkpoint_of_another_model_is_refused(tiny):
    state = build_trainer(validate_recipe(tiny)).state_dict()
    tiny["model"]["args"]["width"] = 8
    with pytest.raises(CheckpointError, match="different model"):
        build_trainer(validate_recipe(tiny)).load_state_dict(state, "last.pt")


def test_users_own_model_data_and_optimizer():
    torch.manual_seed(0)
    x = torch.randn(64, 1, 8, 8)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 2))
    trainer = Trainer(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-2),
        DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True),
        val_loader=DataLoader(TensorDataset(x, y), batch_size=32),
        device="cpu",
    )
    summary = trainer.fit()
    assert summary["status"] == "completed" and summary["metrics"]["val_accuracy"] is not None


def test_a_loader_without_batches_is_an_error_not_a_hang(tiny):
    from accel.errors import AccelError

    tiny["data"]["batch_size"] = 1024  # more than the 51 training samples, and the last batch is dropped
    tiny["train"]["max_steps"] = 3
    with pytest.raises(AccelError, match="no batches"):
        build_trainer(validate_recipe(tiny)).fit()


def test_eval_max_batches_evaluates_only_the_first_batches():
    from accel.config.train_config import TrainConfig

    class Counting(list):
        served = 0

        def __iter__(self):
            for batch in super().__iter__():
                Counting.served += 1
                yield batch

    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    val = Counting([(torch.randn(5, 4), torch.randint(0, 3, (5,))) for _ in range(6)])
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        val[:2],
        val_loader=val,
        device="cpu",
        config=TrainConfig(eval_max_batches=2),
    )
    whole = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), val[:2], val_loader=val[:2], device="cpu")
    assert trainer.evaluate() == whole.evaluate()  # the first two batches, and nothing else
    assert Counting.served == 2


@pytest.mark.parametrize("others_cpu_s, said", [(10.0, True), (0.0, False)])
def test_a_fit_says_when_the_machine_was_busy_while_it_trained(tiny, monkeypatch, caplog, others_cpu_s, said):
    from accel.measure import load

    # 10 s on 2 cores, 5 CPU-s of them the run's own: the rest is others' (10 CPU-s: half the cores)
    readings = iter([load.Counters(0.0, 0.0, 0.0, 0.0, 2), load.Counters(10.0, 5.0 + others_cpu_s, 0.0, 5.0, 2)])
    monkeypatch.setattr(load, "counters", lambda: next(readings))
    summary = build_trainer(validate_recipe(tiny)).fit()
    if said:
        assert "other processes took 50% of the 2 core(s)" in summary["busy"]
        assert "busy machine: the machine was busy while this run trained" in caplog.text
    else:
        assert "busy" not in summary and "busy machine" not in caplog.text
