"""What a Trainer trains is what it says it trained: a loader used up after one pass, and fit() called again."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accel import Trainer
from accel.config.train_config import TrainConfig
from accel.errors import AccelError


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    return [(torch.randn(4, 6), torch.randint(0, 3, (4,))) for _ in range(5)]


def _trainer(loader, **train) -> Trainer:
    model = nn.Linear(6, 3)
    return Trainer(
        model, torch.optim.SGD(model.parameters(), lr=0.1), loader, device="cpu", config=TrainConfig(**train)
    )


def test_a_loader_used_up_after_one_pass_is_an_error_not_empty_epochs():
    trainer = _trainer((batch for batch in _batches()), epochs=3)
    with pytest.raises(AccelError) as caught:
        trainer.fit()
    assert trainer.step == 5 and trainer.epoch == 1  # the first pass trained
    message = str(caught.value)
    assert "the training loader yielded no batch in epoch 2, after 5 steps: it is exhausted after one pass" in message
    assert "a DataLoader, a list" in message and "train.max_steps" in message


def test_a_one_shot_loader_within_max_steps_trains():
    assert _trainer((batch for batch in _batches()), epochs=3, max_steps=4).fit()["status"] == "completed"


def test_an_empty_loader_without_a_length_is_an_error():
    with pytest.raises(AccelError, match="the training loader yielded no batch: it is empty"):
        _trainer(iter([])).fit()


def test_fit_again_on_a_finished_trainer_says_so_and_trains_on_when_the_budget_grows():
    trainer = _trainer(_batches(), epochs=2)
    assert trainer.fit()["epochs"] == 2
    with pytest.raises(
        AccelError,
        match=r"nothing left to train: this trainer's budget is spent \(train.epochs 2, "
        r"2 done\)\. To train further, raise train.epochs or train.max_steps",
    ):
        trainer.fit()
    trainer.cfg.epochs = 3
    summary = trainer.fit()
    assert summary["status"] == "completed" and summary["epochs"] == 3 and trainer.step == 15
