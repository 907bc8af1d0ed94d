"""Language modelling: next-token prediction over `(inputs, targets)` token batches, targets shifted by one."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from ..registry import TASKS
from ..schema import StrictModel
from .base import Task, logits_of

IGNORE = -100  # the target value that is not scored (padding), as in torch and Hugging Face


@TASKS.register("language_model")
class LanguageModel(Task):
    """`model(inputs)` gives logits `[B, T, V]` for token ids `[B, T]`; the loss is the mean cross-entropy of
    each position's next token. Evaluation: val_loss (nats per token), perplexity, bits per token and
    next-token accuracy, averaged over tokens."""

    name = "language_model"

    class Config(StrictModel):
        name: Literal["language_model"] = "language_model"
        accuracy: bool = Field(True, description="also report next-token accuracy in evaluation")

    @classmethod
    def from_config(cls, cfg: Config, loss: nn.Module) -> LanguageModel:
        return cls(label_smoothing=getattr(loss, "label_smoothing", 0.0), accuracy=cfg.accuracy)

    def __init__(self, label_smoothing: float = 0.0, accuracy: bool = True):
        self.label_smoothing, self.accuracy = label_smoothing, accuracy

    def loss(self, model: Any, batch: Any) -> torch.Tensor:
        inputs, targets = batch
        logits = logits_of(model(inputs))
        return F.cross_entropy(
            logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE, label_smoothing=self.label_smoothing
        )

    def samples(self, batch: Any) -> int:
        return len(batch[1])

    def tokens(self, batch: Any) -> int:
        return batch[1].numel()

    def eval_sums(self, model: Any, batch: Any) -> dict[str, torch.Tensor]:
        inputs, targets = batch
        logits = logits_of(model(inputs)).flatten(0, -2).float()
        targets = targets.flatten()
        scored = targets != IGNORE
        sums = {
            "loss": F.cross_entropy(logits, targets, ignore_index=IGNORE, reduction="sum"),
            "tokens": scored.sum().double(),
        }
        if self.accuracy:
            sums["accuracy"] = ((logits.argmax(-1) == targets) & scored).sum().double()
        return sums

    def metrics(self, totals: dict[str, float]) -> dict[str, float]:
        tokens = max(totals["tokens"], 1)
        loss = totals["loss"] / tokens
        metrics = {
            "val_loss": loss,
            "val_perplexity": math.exp(min(loss, 700.0)),
            "val_bits_per_token": loss / math.log(2),
        }
        if "accuracy" in totals:
            metrics["val_accuracy"] = totals["accuracy"] / tokens
        return metrics
