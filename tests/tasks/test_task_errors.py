"""What a newcomer's model gets wrong, said as what came back and what to write instead (issue 39): nanoGPT's
`(logits, loss)` under model_loss, its last-position logits under language_model, a loss that does not reduce,
integer outputs and a model on the meta device; each a message, not a torch traceback."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Trainer
from accel.config.recipe import TrainConfig
from accel.errors import AccelError
from accel.tasks import LanguageModel, ModelLoss

VOCAB, CONTEXT = 11, 6


class NanoGPTLike(nn.Module):
    """nanoGPT's contract: `forward(idx, targets=None)` returns `(logits, loss)`; without targets, only the last
    position's logits (and loss None)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 8)
        self.head = nn.Linear(8, VOCAB)

    def forward(self, idx, targets=None):
        x = self.embed(idx)
        if targets is None:
            return self.head(x[:, [-1], :]), None
        logits = self.head(x)
        return logits, F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def tokens(n: int = 32) -> TensorDataset:
    ids = torch.randint(0, VOCAB, (n, CONTEXT + 1), generator=torch.Generator().manual_seed(0))
    return TensorDataset(ids[:, :-1], ids[:, 1:])


def fit(model, task=None, loss_fn=None, data=None) -> dict:
    data = data if data is not None else tokens()
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(data, batch_size=8),
        val_loader=DataLoader(data, batch_size=8),
        device="cpu",
        config=TrainConfig(epochs=1),
        task=task,
        loss_fn=loss_fn,
    )
    return trainer.fit()


def test_model_loss_reads_the_loss_out_of_nanogpts_logits_and_loss_tuple():
    summary = fit(NanoGPTLike(), task=ModelLoss())
    assert summary["status"] == "completed" and math.isfinite(summary["metrics"]["val_loss"])


def test_model_loss_says_what_came_back_when_there_is_no_loss_in_it():
    class LogitsOnly(NanoGPTLike):
        def forward(self, idx, targets=None):
            return super().forward(idx)  # drops the targets: (last logits, None)

    with pytest.raises(AccelError) as caught:
        fit(LogitsOnly(), task=ModelLoss())
    message = str(caught.value)
    assert "returned a tuple of (a tensor of shape [8, 1, 11], None), with no loss in it" in message
    assert "nanoGPT's `(logits, loss)`" in message and "task: classification or language_model" in message


def test_language_model_names_last_position_logits_and_the_targets_shape():
    with pytest.raises(AccelError) as caught:
        fit(NanoGPTLike(), task=LanguageModel())
    message = str(caught.value)
    assert f"logits of shape [8, 1, {VOCAB}] for targets of shape [8, {CONTEXT}]" in message
    assert "the last position's logits only" in message and "task: model_loss" in message


def test_language_model_still_trains_a_model_that_returns_every_positions_logits():
    class Full(NanoGPTLike):
        def forward(self, idx):
            return self.head(self.embed(idx))

    assert fit(Full(), task=LanguageModel())["status"] == "completed"


def classes(n: int = 32) -> TensorDataset:
    return TensorDataset(torch.randn(n, 4), torch.randint(0, 3, (n,), generator=torch.Generator().manual_seed(0)))


def test_a_loss_fn_that_does_not_reduce_is_named_with_its_shape():
    with pytest.raises(AccelError, match=r"loss_fn returned a loss of shape \[8\], not one number.*reduction='none'"):
        fit(nn.Linear(4, 3), loss_fn=nn.CrossEntropyLoss(reduction="none"), data=classes())


def test_integer_outputs_are_named_as_not_scores():
    class Argmax(nn.Linear):
        def forward(self, x):
            return super().forward(x).argmax(1)

    with pytest.raises(AccelError, match=r"returned torch.int64 outputs of shape \[8\], not scores.*before any argmax"):
        fit(Argmax(4, 3), data=classes())


def test_a_model_on_the_meta_device_is_refused_before_training():
    with torch.device("meta"):
        model = nn.Linear(4, 3)
    with pytest.raises(AccelError, match=r"`weight` is on the meta device.*to_empty"):
        fit(model, data=classes())
