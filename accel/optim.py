"""Optimizers and learning-rate schedules by name. Schedules are stepped once per optimizer step."""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field

from .registry import OPTIMIZERS, SCHEDULERS
from .schema import StrictModel


class OptimizerConfig(StrictModel):
    name: str
    lr: float = Field(1e-3, gt=0, description="peak learning rate")
    weight_decay: float = Field(0.0, ge=0, description="decoupled (AdamW) or L2 (SGD) weight decay")


@OPTIMIZERS.register("sgd")
class SGD:
    class Config(OptimizerConfig):
        name: Literal["sgd"] = "sgd"
        momentum: float = Field(0.9, ge=0, lt=1, description="heavy-ball momentum")
        nesterov: bool = Field(True, description="Nesterov momentum (needs momentum > 0)")

    @staticmethod
    def build(cfg: "SGD.Config", params) -> torch.optim.Optimizer:
        return torch.optim.SGD(
            params,
            lr=cfg.lr,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
            nesterov=cfg.nesterov and cfg.momentum > 0,
        )


@OPTIMIZERS.register("adamw")
class AdamW:
    class Config(OptimizerConfig):
        name: Literal["adamw"] = "adamw"
        betas: tuple[float, float] = Field((0.9, 0.999), description="moment decay rates")
        eps: float = Field(1e-8, gt=0, description="denominator guard")
        weight_decay: float = Field(0.01, ge=0, description="decoupled weight decay")

    @staticmethod
    def build(cfg: "AdamW.Config", params) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)


def build_optimizer(cfg: OptimizerConfig, params) -> torch.optim.Optimizer:
    return OPTIMIZERS.get(cfg.name).build(cfg, params)


@SCHEDULERS.register("none")
class ConstantLR:
    class Config(StrictModel):
        name: Literal["none"] = "none"

    @staticmethod
    def build(cfg, optimizer, *, total_steps: int, steps_per_epoch: int):
        return None


@SCHEDULERS.register("onecycle")
class OneCycle:
    class Config(StrictModel):
        name: Literal["onecycle"] = "onecycle"
        pct_start: float = Field(0.25, gt=0, lt=1, description="fraction of steps spent warming up")
        div_factor: float = Field(25.0, gt=1, description="initial lr = peak / div_factor")
        final_div_factor: float = Field(1e4, gt=1, description="final lr = initial lr / final_div_factor")

    @staticmethod
    def build(cfg, optimizer, *, total_steps: int, steps_per_epoch: int):
        peak = [group["lr"] for group in optimizer.param_groups]
        return torch.optim.lr_scheduler.OneCycleLR(
            # torch divides by the warm-up length: keep it at least one step on very short runs
            optimizer,
            max_lr=peak,
            total_steps=max(total_steps, math.floor(1 / cfg.pct_start) + 1),
            pct_start=cfg.pct_start,
            div_factor=cfg.div_factor,
            final_div_factor=cfg.final_div_factor,
            cycle_momentum=False,
        )


@SCHEDULERS.register("cosine")
class Cosine:
    class Config(StrictModel):
        name: Literal["cosine"] = "cosine"
        warmup_steps: int = Field(0, ge=0, description="linear warm-up from lr/100 over this many steps")
        min_lr_ratio: float = Field(0.0, ge=0, le=1, description="final lr as a fraction of the peak")

    @staticmethod
    def build(cfg, optimizer, *, total_steps: int, steps_per_epoch: int):
        sched = torch.optim.lr_scheduler
        peak = optimizer.param_groups[0]["lr"]
        cosine = sched.CosineAnnealingLR(
            optimizer, T_max=max(total_steps - cfg.warmup_steps, 1), eta_min=peak * cfg.min_lr_ratio
        )
        if not cfg.warmup_steps:
            return cosine
        warmup = sched.LinearLR(optimizer, start_factor=0.01, total_iters=cfg.warmup_steps)
        return sched.SequentialLR(optimizer, [warmup, cosine], milestones=[cfg.warmup_steps])


@SCHEDULERS.register("step")
class StepDecay:
    class Config(StrictModel):
        name: Literal["step"] = "step"
        every_epochs: int = Field(30, ge=1, description="multiply the lr by gamma every N epochs")
        gamma: float = Field(0.1, gt=0, le=1, description="decay factor")

    @staticmethod
    def build(cfg, optimizer, *, total_steps: int, steps_per_epoch: int):
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=cfg.every_epochs * steps_per_epoch, gamma=cfg.gamma)


def build_scheduler(cfg, optimizer, *, total_steps: int, steps_per_epoch: int):
    return SCHEDULERS.get(cfg.name).build(cfg, optimizer, total_steps=total_steps, steps_per_epoch=steps_per_epoch)
