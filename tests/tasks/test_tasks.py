"""Any model, any task through the Trainer: a plain function, dict batches with a model that returns its loss,
regression with a user's loss, and a loss on sequence-shaped outputs; each trains and evaluates."""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from accel import Trainer, devices
from accel.batches import leading_size
from accel.config.recipe import TrainConfig
from accel.errors import AccelError
from accel.speedups.channels_last import ChannelsLast
from accel.tasks import ModelLoss, Task

torch.manual_seed(0)


def fit(model, train, val, **kw) -> dict:
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.05),
        DataLoader(train, batch_size=8),
        val_loader=DataLoader(val, batch_size=8),
        device="cpu",
        config=TrainConfig(epochs=2),
        **kw,
    )
    return trainer.fit()


def regression_data(n: int = 48):
    x = torch.randn(n, 3)
    return TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1)


def test_a_plain_function_is_a_task_and_its_extra_values_are_averaged():
    def step(model, batch):
        x, y = batch
        error = model(x) - y
        return error.pow(2).mean(), {"mae": error.abs().mean()}

    summary = fit(nn.Linear(3, 1), regression_data(), regression_data(16), task=step)
    assert summary["status"] == "completed" and math.isfinite(summary["metrics"]["val_loss"])
    assert 0 < summary["metrics"]["val_mae"] < math.sqrt(summary["metrics"]["val_loss"]) * 2


def test_regression_with_a_users_loss_reports_that_loss_on_the_validation_set():
    model, val = nn.Linear(3, 1), regression_data(16)
    summary = fit(model, regression_data(), val, loss_fn=F.mse_loss)
    with torch.no_grad():
        expected = F.mse_loss(model(val.tensors[0]), val.tensors[1]).item()
    assert summary["metrics"]["val_loss"] == pytest.approx(expected, rel=1e-5)
    assert summary["metrics"]["val_accuracy"] is None  # no class scores, no accuracy


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 11):
        super().__init__()
        self.embed, self.head = nn.Embedding(vocab, 8), nn.Linear(8, vocab)

    def forward(self, idx):
        return self.head(self.embed(idx))  # [B, T, V]


def sequence_loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_a_loss_on_sequence_shaped_outputs_trains_and_evaluates():
    tokens = torch.randint(0, 11, (40, 9))
    data = TensorDataset(tokens[:, :-1], tokens[:, 1:])
    model = TinyLM()
    summary = fit(model, data, data, loss_fn=sequence_loss)  # evaluation used to assume [N, C] logits
    with torch.no_grad():
        expected = sequence_loss(model(tokens[:, :-1]), tokens[:, 1:]).item()
    assert summary["metrics"]["val_loss"] == pytest.approx(expected, rel=1e-5)


class DictBatches(Dataset):
    def __init__(self, n: int = 32):
        self.ids = torch.randint(0, 11, (n, 6))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class ReturnsItsLoss(nn.Module):
    """The Hugging Face convention: forward(**batch) returns a dict holding `loss`."""

    def __init__(self):
        super().__init__()
        self.lm = TinyLM()

    def forward(self, input_ids, labels):
        logits = self.lm(input_ids)
        return {"loss": sequence_loss(logits, labels), "logits": logits}


def test_dict_batches_and_a_model_that_returns_its_loss():
    summary = fit(ReturnsItsLoss(), DictBatches(), DictBatches(16), task=ModelLoss())
    assert math.isfinite(summary["metrics"]["val_loss"]) and summary["steps"] == 2 * 4


def test_speed_ups_prepare_image_tensors_only():
    seen = []

    class Images(Task):
        def loss(self, model, batch):
            seen.append((batch["image"].is_contiguous(memory_format=torch.channels_last), batch["ids"].dim()))
            return model(batch["image"]).mean() + 0 * batch["ids"].sum()

    images = [{"image": torch.randn(3, 8, 8), "ids": torch.arange(4)} for _ in range(8)]
    model = nn.Conv2d(3, 2, 3)
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(images, batch_size=4),
        task=Images(),
        speedups=[ChannelsLast()],
        device="cpu",
        config=TrainConfig(epochs=1),
    )
    trainer.fit()
    # the image went channels-last, the token ids were left alone: in the FLOP count and the two steps
    assert seen == [(True, 2)] * 3


def test_task_and_loss_fn_together_are_refused():
    model = nn.Linear(3, 1)
    with pytest.raises(TypeError, match="either task= or loss_fn="):
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), [], task=ModelLoss(), loss_fn=F.mse_loss)


@dataclasses.dataclass
class Pair:
    x: torch.Tensor
    y: torch.Tensor
    note: str = "kept as it is"


class Named(NamedTuple):
    pair: Pair
    weight: torch.Tensor


def test_namedtuple_and_dataclass_batches_move_to_the_device_whole():
    batch = Named(Pair(torch.ones(2, 3), torch.zeros(2)), torch.full((2,), 0.5))
    moved = devices.to_device(batch, torch.device("meta"))
    assert type(moved) is Named and type(moved.pair) is Pair and moved.pair.note == "kept as it is"
    assert {t.device.type for t in (moved.pair.x, moved.pair.y, moved.weight)} == {"meta"}
    assert leading_size(batch) == 2

    def step(model, batch):
        return ((model(batch.pair.x).squeeze(1) - batch.pair.y) ** 2 * batch.weight).mean()

    batches = [batch] * 3
    model = nn.Linear(3, 1)
    summary = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        batches,
        val_loader=batches,
        task=step,
        device="cpu",
        config=TrainConfig(epochs=1),
    ).fit()
    assert summary["status"] == "completed" and math.isfinite(summary["metrics"]["val_loss"])


@dataclasses.dataclass
class Scores:
    logits: torch.Tensor
    features: torch.Tensor


class Wrapped(nn.Module):
    """A classifier that returns its scores inside a dict, a dataclass or a tuple, as many models do."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind, self.linear = kind, nn.Linear(3, 2)

    def forward(self, x):
        logits = self.linear(x)
        return {
            "dict": lambda: {"logits": logits, "features": x},
            "dataclass": lambda: Scores(logits, x),
            "tuple": lambda: (logits, x),
        }[self.kind]()


def classes(n: int = 48):
    x = torch.randn(n, 3)
    return TensorDataset(x, (x[:, 0] > 0).long())


@pytest.mark.parametrize("kind", ["dict", "dataclass", "tuple"])
def test_classification_reads_the_scores_out_of_dicts_dataclasses_and_tuples(kind):
    torch.manual_seed(0)
    model, val = Wrapped(kind), classes(16)
    summary = fit(model, classes(), val)
    assert summary["status"] == "completed" and math.isfinite(summary["metrics"]["val_loss"])
    x, y = val.tensors
    expected = F.cross_entropy(model.linear(x), y).item()
    assert summary["metrics"]["val_loss"] == pytest.approx(expected, rel=1e-5)
    assert 0 <= summary["metrics"]["val_accuracy"] <= 1


def test_a_dict_without_logits_is_named():
    class Features(Wrapped):
        def forward(self, x):
            return {"features": self.linear(x)}

    with pytest.raises(AccelError, match=r"dict without `logits` \(keys: features\)"):
        fit(Features("dict"), classes(), classes(16))
