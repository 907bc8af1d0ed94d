"""Training losses by name. Targets may be class indices or (for mixup/cutmix) soft distributions."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from torch import nn

from ..registry import LOSSES
from ..schema import StrictModel


@LOSSES.register("cross_entropy")
class CrossEntropy:
    class Config(StrictModel):
        name: Literal["cross_entropy"] = "cross_entropy"
        label_smoothing: float = Field(0.0, ge=0, lt=1, description="mass spread evenly over all classes")

    @staticmethod
    def build(cfg: "CrossEntropy.Config") -> nn.Module:
        # nn.CrossEntropyLoss takes both index and probability targets, so mixup needs no other loss.
        return nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)


def build_loss(cfg) -> nn.Module:
    return LOSSES.get(cfg.name).build(cfg)
