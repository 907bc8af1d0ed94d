"""From a recipe to a finished run directory: build every component, train, write the summary."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from .. import devices
from ..callbacks import Callback, Checkpointer, EarlyStopping, ProgressBar, RunDirWriter, TensorBoard
from ..callbacks.data_wait import DataWaitWarning
from ..config.recipe import Recipe
from ..data.pipeline import build_data_pipeline
from ..errors import AccelError, CheckpointError
from ..measure import memory_snapshot
from ..models import build_model
from ..optimizers.builders import build_optimizer, build_scheduler
from ..optimizers.param_groups import regroup
from ..registry import DATASETS
from ..runs import sharded_checkpoint, signals
from ..runs.checkpoint import load_checkpoint, with_later_state
from ..runs.records import FitSummary
from ..runs.resume import apply_recipe_values, optimizer_changes
from ..runs.rng import rank_seed, seed_everything
from ..runs.rundir import RunDir
from ..runs.sharded_checkpoint import ShardedSaver
from ..speedups import from_configs, refuse
from ..strategy import choose
from ..strategy.world import destroy_process_group, init_process_group, restart_count, world_from_env
from ..tasks import Classification, Task, build_task
from ..tasks.losses import build_loss
from .trainer import Trainer, steps_per_epoch

log = logging.getLogger("accel")


def build_trainer(recipe: Recipe, run_dir: RunDir | None = None, extra_callbacks: list[Callback] = ()) -> Trainer:
    """Everything a recipe describes, wired into a Trainer (not yet fitted)."""
    world = world_from_env()
    device = init_process_group(world, devices.resolve_device(recipe.device))
    seed_everything(recipe.seed)  # the same on every rank: the model starts identical everywhere
    splits = DATASETS.get(recipe.data.dataset.name).build(recipe.data.dataset, recipe.seed)
    # on the device before the optimizer sees it: moving to XLA replaces parameter objects
    task = build_task(recipe.task, build_loss(recipe.loss))
    _check_task_fits(recipe, task)
    model = build_model(recipe.model, **splits.model_args()).to(device)
    speedups = from_configs(recipe.speedups)
    strategy = choose(recipe.strategy, world, device)
    if not strategy.follows_device:  # refused before sharding changes the model (the trainer checks the rest)
        refuse(speedups, device, strategy)
    model = strategy.prepare(model)  # before the optimizer is built: sharding replaces the parameters
    if world.rank:  # random augmentation must differ between ranks (DDP copies rank 0's weights anyway)
        seed_everything(rank_seed(recipe.seed, world.rank))
    data = build_data_pipeline(
        recipe.data, splits, device=device, seed=recipe.seed, rank=world.rank, world_size=world.size
    )
    train_loader, val_loader = data.train_loader, data.val_loader
    optimizer = build_optimizer(recipe.optim, model)
    per_epoch = steps_per_epoch(len(train_loader), recipe.train.grad_accum)
    total = recipe.train.max_steps or per_epoch * recipe.train.epochs
    scheduler = build_scheduler(recipe.schedule, optimizer, total_steps=total, steps_per_epoch=per_epoch)
    train_loader, val_loader = strategy.loaders(train_loader, val_loader)
    return Trainer(
        model,
        optimizer,
        train_loader,
        val_loader=val_loader,
        task=task,
        scheduler=scheduler,
        config=recipe.train,
        speedups=speedups,
        strategy=strategy,
        callbacks=_callbacks(recipe, run_dir, world.rank, strategy.name == "fsdp")
        + data.callbacks
        + list(extra_callbacks),
        device=device,
        train_transform=data.train_transform,
        eval_transform=data.eval_transform,
        log_every_steps=recipe.log.every_steps,
        strict=recipe.strict,
        world=world,
    )


def _check_task_fits(recipe: Recipe, task: Task) -> None:
    """Mixing samples mixes their labels as class distributions: that means something for classification only."""
    mixing = sorted(
        {
            name
            for entry in recipe.data.augment.ops
            if getattr(entry.op, "mixes_labels", False)
            for name in entry.model_fields_set
        }
    )
    if mixing and not isinstance(task, Classification):
        raise AccelError(
            f"data.augment: {' and '.join(mixing)} mix class labels, so they need `task: "
            f"classification`, not `{task.name}`; remove them from the recipe"
        )


def _callbacks(recipe: Recipe, run_dir: RunDir | None, rank: int, sharded: bool) -> list[Callback]:
    """Early stopping runs on every rank (they must agree), and so does checkpointing a sharded model (its
    state is gathered from every rank, or each rank writes its shards); rank 0 alone runs the rest."""
    callbacks: list[Callback] = []
    if recipe.train.early_stopping is not None:
        callbacks.append(EarlyStopping(**recipe.train.early_stopping.model_dump()))
    writes = rank == 0 and run_dir is not None
    shards = (
        ShardedSaver(run_dir, rank, recipe.checkpoint.background)
        if sharded and recipe.checkpoint.sharded and run_dir is not None
        else None
    )
    if writes or sharded:
        # checkpoint first: a summary that says "completed" has its checkpoint already on disk
        callbacks.append(Checkpointer(run_dir if writes else None, recipe.checkpoint, gathered=sharded, sharded=shards))
    if writes:
        callbacks.append(ProgressBar(bar=recipe.log.progress))
        callbacks.append(RunDirWriter(run_dir))
        callbacks.append(DataWaitWarning(recipe.data))
        if recipe.log.tensorboard:
            callbacks.append(TensorBoard(run_dir.tensorboard))
    return callbacks


def run_recipe(
    recipe: Recipe,
    out: str | Path | None = None,
    resume: bool = False,
    restartable: bool = False,
    callbacks: list[Callback] = (),
) -> dict[str, Any]:
    """Train a recipe into a run directory and return its summary: summary.json's fields (`train_recipe`'s,
    as a dict)."""
    return train_recipe(recipe, out, resume, restartable, callbacks).model_dump(exclude_unset=True)


def train_recipe(
    recipe: Recipe,
    out: str | Path | None = None,
    resume: bool = False,
    restartable: bool = False,
    callbacks: list[Callback] = (),
) -> FitSummary:
    """Train a recipe into a run directory and return its summary (also written to summary.json); `callbacks`
    join the recipe's (`accel train --profile`'s profile window).

    The writing process (rank 0) holds the directory's lock throughout: a second writer is refused before it
    changes anything. `restartable`: torchrun restarts the processes when one fails (`--max-restarts`), and a
    restart continues the run its earlier attempt wrote in `out` (whoever started them checked `out` first)."""
    run_dir = RunDir(out) if out is not None else RunDir.default_for(recipe.name)
    is_main = world_from_env().is_main
    lock = None
    try:
        with signals.abort_on_signals():  # start-up writes nothing (_train says when that ends)
            lock = run_dir.lock() if is_main else None
            if restartable and not resume:
                resume = continues_earlier_attempt(run_dir, is_main)
            if is_main:
                check_can_start(run_dir, recipe, resume)
            elif resume and not run_dir.has_checkpoint():
                raise CheckpointError(no_checkpoint_message(run_dir))
            if is_main and resume:
                run_dir.remove_stale_temp_files()
        ended_well = False
        try:
            summary = _train(recipe, run_dir, resume, callbacks)
            ended_well = True
        finally:
            # the trainer is gone by now (it lived in _train): nothing holds the process group but torch's
            # registry, so destroying it joins gloo's threads instead of leaving them to die with the interpreter
            destroy_process_group(wait_for_others=ended_well)
    finally:
        if lock is not None:
            lock.release()
    summary.run_dir = str(run_dir.path)
    return summary


def continues_earlier_attempt(run_dir: RunDir, is_main: bool) -> bool:
    """Whether a restarted group resumes: from the last checkpoint of its earlier attempt, or, when that attempt
    died before writing one, by starting the run over in the same directory (rank 0 clears what it wrote; only
    on a restart: a first start in a folder that holds a run is refused as ever)."""
    if run_dir.has_checkpoint():
        if is_main:
            log.info("restart %d: continuing %s from its last checkpoint", restart_count(), run_dir.path)
        return True
    if is_main and restart_count() and run_dir.holds_run():
        log.info("restart %d: no checkpoint in %s yet; starting the run over", restart_count(), run_dir.path)
        run_dir.clear_unsaved_attempt()
    return False


def check_can_start(run_dir: RunDir, recipe: Recipe, resume: bool) -> None:
    """Refuse, before anything is written, a run that would overwrite another or a resume with nothing to do."""
    if not resume:
        run_dir.check_new()
        return
    run_dir.check_resumable(recipe.train.epochs, recipe.train.max_steps)
    if not run_dir.has_checkpoint():
        raise CheckpointError(no_checkpoint_message(run_dir))


def no_checkpoint_message(run_dir: RunDir) -> str:
    if run_dir.holds_run():  # one that stopped before its first checkpoint: neither resumable nor reusable as is
        summary = run_dir.read_summary()
        status = summary.status if summary is not None else None
        return (
            f"--resume: {run_dir.path} holds a run{f' ({status})' if status else ''} that stopped before its "
            f"first checkpoint, so there is nothing to continue. {run_dir.start_over()}"
        )
    return (
        f"--resume: no checkpoint at {run_dir.last_checkpoint}. Run without --resume first, or point --out at "
        "the run directory that has checkpoints/last.pt (or checkpoints/last/, sharded)."
    )


def _train(recipe: Recipe, run_dir: RunDir, resume: bool, callbacks: list[Callback]) -> FitSummary:
    with signals.abort_on_signals():  # start-up writes nothing: a signal stops it and leaves the directory as it was
        # a resume takes the weights from its checkpoint: the recipe's pretrained file is not read again
        built = recipe.model_copy(update={"model": recipe.model.without_weights()}) if resume else recipe
        trainer = build_trainer(built, run_dir, callbacks)
        if resume:  # every rank loads the same file; a checkpoint that does not fit is refused before any write
            _resume(trainer, run_dir.resume_checkpoint(), recipe)
    # from the first write to the last, a signal asks the run to stop: it ends with a checkpoint (at step 0 if
    # need be) and a summary, so the directory can always be resumed
    with signals.stop_requests(trainer._request_stop):
        if trainer.world.is_main:
            run_dir.write_start(recipe.dump_yaml(), devices.environment(trainer.device))
        # rank 0 writes the run directory: its snapshot is the one kept
        with (
            memory_snapshot.dump_on_oom(trainer.device, run_dir.oom_snapshot)
            if trainer.world.is_main
            else nullcontext()
        ):
            trainer.fit()
            return trainer.summary


def _resume(trainer: Trainer, path: Path, recipe: Recipe) -> None:
    """From last.pt (whole tensors, rank 0's RNG) or a sharded folder (DCP reshards it to this world size)."""
    state = sharded_checkpoint.load(path, trainer, trainer.world.rank) if path.is_dir() else load_checkpoint(path)
    state = with_later_state(state, path)  # an older accel's checkpoint resumes, saying what it lacks
    # one from before per-name groups (1-D parameters undecayed) is laid out as this recipe's groups
    order = [name for name, _ in trainer.module.named_parameters()]
    state["optimizer"] = regroup(state["optimizer"], trainer.optimizer, order, path)
    # the recipe is the truth: its optimizer settings replace the checkpoint's (README, "Run directories")
    changes = optimizer_changes(
        trainer.optimizer, state["optimizer"], recipe.optim, trainer.scheduler is not None, path
    )
    trainer.load_state_dict(state, path)
    apply_recipe_values(trainer.optimizer, changes)
    # no RNG state, or rank 0's: this rank needs streams of its own
    if state["rng"] is None or (trainer.world.rank and not state.get("rank_state")):
        seed_everything(rank_seed(recipe.seed, trainer.world.rank) + trainer.step)
    log.info("resumed from %s at epoch %d, step %d", path, trainer.epoch, trainer.step)
