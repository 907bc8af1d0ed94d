"""From a recipe to a finished run directory: build every component, train, write the summary."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from . import devices
from .callbacks import Callback, Checkpointer, EarlyStopping, ProgressBar, TensorBoard
from .checkpoint import load_checkpoint
from .data.loaders import build_loader
from .data.normalize import Normalize
from .data.sampler import EpochSampler
from .errors import CheckpointError
from .losses import build_loss
from .models import build_model
from .optim import build_optimizer, build_scheduler
from .recipe import Recipe
from .registry import DATASETS
from .rng import seed_everything
from .rundir import RunDir, RunDirWriter
from .speedups import from_configs
from .trainer import Trainer, steps_per_epoch

log = logging.getLogger("accel")


def build_trainer(recipe: Recipe, run_dir: RunDir | None = None, extra_callbacks: list[Callback] = ()) -> Trainer:
    """Everything a recipe describes, wired into a Trainer (not yet fitted)."""
    seed_everything(recipe.seed)
    device = devices.resolve_device(recipe.device)
    splits = DATASETS.get(recipe.data.dataset.name).build(recipe.data.dataset, recipe.seed)
    model = build_model(recipe.model, num_classes=splits.num_classes, in_channels=splits.sample_shape[0])
    train_loader = _loader(recipe, splits.train, device, train=True)
    val_loader = _loader(recipe, splits.val, device, train=False) if splits.val is not None else None
    optimizer = build_optimizer(recipe.optim, model.parameters())
    per_epoch = steps_per_epoch(len(train_loader), recipe.train.grad_accum)
    total = recipe.train.max_steps or per_epoch * recipe.train.epochs
    scheduler = build_scheduler(recipe.schedule, optimizer, total_steps=total, steps_per_epoch=per_epoch)
    normalize = Normalize(splits.mean, splits.std)
    return Trainer(model, optimizer, train_loader, val_loader=val_loader, loss_fn=build_loss(recipe.loss),
                   scheduler=scheduler, config=recipe.train, speedups=from_configs(recipe.speedups),
                   callbacks=_callbacks(recipe, run_dir) + list(extra_callbacks), device=device,
                   train_transform=normalize, eval_transform=normalize, log_every_steps=recipe.log.every_steps,
                   strict=recipe.strict)


def _loader(recipe: Recipe, dataset, device: torch.device, train: bool):
    data = recipe.data
    sampler = EpochSampler(len(dataset), shuffle=train, seed=recipe.seed)
    batch_size = data.batch_size if train else (data.eval_batch_size or data.batch_size)
    return build_loader(dataset, data.loader, batch_size=batch_size, sampler=sampler,
                        drop_last=train and data.drop_last, seed=recipe.seed, device=device)


def _callbacks(recipe: Recipe, run_dir: RunDir | None) -> list[Callback]:
    callbacks: list[Callback] = [ProgressBar(bar=recipe.log.progress)]
    if recipe.train.early_stopping is not None:
        callbacks.append(EarlyStopping(**recipe.train.early_stopping.model_dump()))
    if run_dir is not None:
        # checkpoint first: a summary that says "completed" has its checkpoint already on disk
        callbacks.append(Checkpointer(run_dir.checkpoints, recipe.checkpoint.every_epochs, recipe.checkpoint.keep))
        callbacks.append(RunDirWriter(run_dir))
        if recipe.log.tensorboard:
            callbacks.append(TensorBoard(run_dir.path / "tb"))
    return callbacks


def run_recipe(recipe: Recipe, out: str | Path | None = None, resume: bool = False) -> dict[str, Any]:
    """Train a recipe into a run directory and return its summary (also written to summary.json)."""
    run_dir = RunDir(out) if out is not None else RunDir.default_for(recipe.name)
    if resume and not run_dir.last_checkpoint.is_file():
        raise CheckpointError(f"--resume: no checkpoint at {run_dir.last_checkpoint}. Run without --resume first, "
                              "or point --out at the run directory that has checkpoints/last.pt.")
    run_dir.write_text("recipe.yaml", recipe.dump_yaml())
    trainer = build_trainer(recipe, run_dir)
    run_dir.write_json("env.json", devices.environment(trainer.device))
    if resume:
        trainer.load_state_dict(load_checkpoint(run_dir.last_checkpoint), run_dir.last_checkpoint)
        log.info("resumed from %s at epoch %d, step %d", run_dir.last_checkpoint, trainer.epoch, trainer.step)
    return trainer.fit()
