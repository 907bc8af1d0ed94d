"""Optimizers and learning-rate schedules by name. Schedules are stepped once per optimizer step.

An optimizer's `build(cfg, model)` gets the model, not just its parameters: muon chooses by name and by block
which parameters it updates."""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from ..errors import AccelError
from ..registry import OPTIMIZERS, SCHEDULERS
from ..schema import StrictModel
from .muon import MuonWithAdamW, refuse_sharded, split_parameters
from .muon_ns import DtypeMuon, choose_ns_dtypes
from .param_groups import ParamGroupConfig, param_groups


class OptimizerConfig(StrictModel):
    name: str
    lr: float = Field(1e-3, gt=0, description="peak learning rate")
    weight_decay: float = Field(0.0, ge=0, description="decoupled (AdamW) or L2 (SGD) weight decay")


class GroupedConfig(OptimizerConfig):
    """An optimizer whose parameters accel groups by name (accel/optimizers/param_groups.py)."""

    decay_1d: bool = Field(
        True,
        description="apply weight_decay to parameters of one dimension (biases, norm weights) too; false leaves "
        "them undecayed, as nanoGPT, timm and Hugging Face train them",
    )
    groups: list[ParamGroupConfig] = Field(
        default_factory=list,
        description="parameter groups by name, each `{params: [patterns], lr:, weight_decay:}`: a parameter "
        "joins the first group whose fnmatch pattern matches its name; the rest keep the settings above",
    )


@OPTIMIZERS.register("sgd")
class SGD:
    class Config(GroupedConfig):
        name: Literal["sgd"] = "sgd"
        momentum: float = Field(0.9, ge=0, lt=1, description="heavy-ball momentum")
        nesterov: bool = Field(True, description="Nesterov momentum (needs momentum > 0)")

    @staticmethod
    def build(cfg: "SGD.Config", model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(
            param_groups(list(model.named_parameters()), cfg.groups, cfg.decay_1d),
            lr=cfg.lr,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
            nesterov=cfg.nesterov and cfg.momentum > 0,
        )


@OPTIMIZERS.register("adamw")
class AdamW:
    class Config(GroupedConfig):
        name: Literal["adamw"] = "adamw"
        betas: tuple[float, float] = Field((0.9, 0.999), description="moment decay rates")
        eps: float = Field(1e-8, gt=0, description="denominator guard")
        weight_decay: float = Field(0.01, ge=0, description="decoupled weight decay")
        decay_1d: bool = Field(
            False,
            description="also decay parameters of one dimension (biases, norm weights); false (the default) "
            "leaves them undecayed, as nanoGPT, timm and Hugging Face train them",
        )

    @staticmethod
    def build(cfg: "AdamW.Config", model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(
            param_groups(list(model.named_parameters()), cfg.groups, cfg.decay_1d),
            lr=cfg.lr,
            betas=cfg.betas,
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
        )


@OPTIMIZERS.register("muon")
class Muon:
    """torch.optim.Muon on the hidden matrices, AdamW on the rest (accel.optimizers.muon, docs/optimizers.md)."""

    class Config(GroupedConfig):
        name: Literal["muon"] = "muon"
        lr: float = Field(
            1e-3,
            gt=0,
            description="peak learning rate of both parts: Muon scales its step to AdamW's size "
            "(adjust_lr_fn='match_rms_adamw', lr x 0.2 x sqrt(larger side)), so one rate suits both",
        )
        weight_decay: float = Field(0.1, ge=0, description="decoupled weight decay of both parts")
        momentum: float = Field(0.95, ge=0, lt=1, description="Muon's momentum")
        nesterov: bool = Field(True, description="Muon's Nesterov momentum")
        ns_steps: int = Field(5, ge=1, lt=100, description="Newton-Schulz iterations that orthogonalise a step")
        ns_dtype: Literal["auto", "bfloat16", "float32"] = Field(
            "auto",
            description="dtype of the Newton-Schulz iteration. auto: bfloat16 (torch's Muon's) on CUDA; float32 "
            "where bf16 is emulated (an AVX2-only CPU), which there costs a fraction of the emulated bf16; on a "
            "CPU with AVX512-BF16 or AMX, whichever measured faster at each matrix shape (float32 on small ones)",
        )
        betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW's moment decay rates")
        eps: float = Field(1e-8, gt=0, description="AdamW's denominator guard")
        muon_params: list[str] = Field(
            default_factory=list,
            description="fnmatch patterns of parameter names (`blocks.*.attn.*`) whose matrices Muon updates; "
            "empty: every matrix inside the model's repeated blocks. The rest, and tensors of more than 2 "
            "dimensions (convolutions), go to AdamW",
        )
        adamw_params: list[str] = Field(
            default_factory=list, description="patterns of parameter names kept on AdamW even where chosen above"
        )
        decay_1d: bool = Field(
            False,
            description="also decay AdamW's parameters of one dimension (biases, norm weights); false (the "
            "default) leaves them undecayed, as the adamw optimizer does",
        )
        groups: list[ParamGroupConfig] = Field(
            default_factory=list,
            description="settings by name for AdamW's parameters, as adamw's optim.groups; Muon's matrices keep "
            "the settings above",
        )

    @staticmethod
    def build(cfg: "Muon.Config", model: nn.Module) -> torch.optim.Optimizer:
        muon, adamw = split_parameters(model, cfg.muon_params, cfg.adamw_params)
        refuse_sharded(muon)
        parts = [
            DtypeMuon(
                muon,  # named: a checkpoint says which tensor each state is (accel/optimizers/param_groups.py)
                choose_ns_dtypes(cfg.ns_dtype, [p for _, p in muon]),
                lr=cfg.lr,
                weight_decay=cfg.weight_decay,
                momentum=cfg.momentum,
                nesterov=cfg.nesterov,
                ns_steps=cfg.ns_steps,
                adjust_lr_fn="match_rms_adamw",
            )
        ]
        if adamw:  # torch refuses an optimizer with no parameters
            parts.append(
                torch.optim.AdamW(
                    param_groups(adamw, cfg.groups, cfg.decay_1d, [name for name, _ in model.named_parameters()]),
                    lr=cfg.lr,
                    betas=cfg.betas,
                    eps=cfg.eps,
                    weight_decay=cfg.weight_decay,
                )
            )
        return MuonWithAdamW(parts)


def build_optimizer(cfg: OptimizerConfig, model: nn.Module) -> torch.optim.Optimizer:
    return OPTIMIZERS.get(cfg.name).build(cfg, model)


def muon_from(model: nn.Module, optimizer: torch.optim.Optimizer) -> MuonWithAdamW:
    """A hand-written loop's engine with `optimizer="muon"`: Muon on the hidden matrices (those of the model's
    repeated blocks), AdamW on the rest, over the loop's own optimizer's parameters and, group by group, its
    learning rates and weight decay (and betas and eps where it has them), so the loop's schedule and its
    no-decay groups carry over. Muon's own settings are the recipe optimizer's defaults."""
    cfg = Muon.Config()
    muon, _ = split_parameters(model, cfg.muon_params, cfg.adamw_params)
    refuse_sharded(muon)
    on_muon = {id(p) for _, p in muon}
    muon_groups, adamw_groups = [], []
    for group in optimizer.param_groups:
        options = {"lr": group["lr"], "weight_decay": group.get("weight_decay", 0.0)}
        mine = [p for p in group["params"] if id(p) in on_muon]
        rest = [p for p in group["params"] if id(p) not in on_muon]
        if mine:
            muon_groups.append({"params": mine, **options})
        if rest:
            adam = {"betas": group.get("betas", cfg.betas), "eps": group.get("eps", cfg.eps)}
            adamw_groups.append({"params": rest, **options, **adam})
    if not muon_groups:
        raise AccelError(
            f"optimizer muon: the loop's optimizer holds none of the hidden matrices of {type(model).__name__}; "
            "give it the model's parameters"
        )
    ns_dtypes = choose_ns_dtypes(cfg.ns_dtype, [p for _, p in muon])
    options = {"momentum": cfg.momentum, "nesterov": cfg.nesterov, "ns_steps": cfg.ns_steps}
    parts = [DtypeMuon(muon_groups, ns_dtypes, adjust_lr_fn="match_rms_adamw", **options)]
    if adamw_groups:  # torch refuses an optimizer with no parameters
        parts.append(torch.optim.AdamW(adamw_groups))
    return MuonWithAdamW(parts)


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


@SCHEDULERS.register("lr_range")
class LRRange:
    """The learning-rate range test (Smith, 2017): the rate grows geometrically over the run while the loss is
    watched; `accel tune --objective time` runs it to propose a learning rate."""

    class Config(StrictModel):
        name: Literal["lr_range"] = "lr_range"
        start_factor: float = Field(0.01, gt=0, description="first lr = lr x start_factor")
        end_factor: float = Field(100.0, gt=0, description="last lr = lr x end_factor")

    @staticmethod
    def build(cfg, optimizer, *, total_steps: int, steps_per_epoch: int):
        growth = (cfg.end_factor / cfg.start_factor) ** (1 / max(total_steps - 1, 1))
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: cfg.start_factor * growth**step)


def build_scheduler(cfg, optimizer, *, total_steps: int, steps_per_epoch: int):
    return SCHEDULERS.get(cfg.name).build(cfg, optimizer, total_steps=total_steps, steps_per_epoch=steps_per_epoch)
