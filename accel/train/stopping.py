"""When a fit stops: its epoch or step budget is spent, a callback or a diverged loss asks, or a signal came."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import AccelError

if TYPE_CHECKING:
    from .trainer import Trainer


def spent(trainer: Trainer) -> bool:
    cfg = trainer.cfg
    over_steps = cfg.max_steps is not None and trainer.step >= cfg.max_steps
    return (
        trainer.should_stop
        or stop_agreed(trainer)
        or over_steps
        or (cfg.max_steps is None and trainer.epoch >= cfg.epochs)
    )


def stop_agreed(trainer: Trainer) -> bool:
    """Whether to stop for a signal. Ranks must stop at the same step or DDP hangs, and agreeing costs a
    collective (and a device sync), so several processes agree only once per logging interval."""
    if trainer.interrupted or not trainer.world.distributed:
        trainer.interrupted = trainer.interrupted or trainer.stop_signal is not None
    elif trainer.step % trainer.log_every_steps == 0:
        trainer.interrupted = trainer.world.any(trainer.stop_signal is not None, trainer.device)
    return trainer.interrupted


def check_left(trainer: Trainer) -> None:
    """fit() again continues from where the trainer is; a trainer with nothing left to train says so instead
    of "completing" again without a step (its budget is read live: raise it to train on)."""
    cfg = trainer.cfg
    if cfg.max_steps is not None and trainer.step >= cfg.max_steps:
        budget = f"train.max_steps {cfg.max_steps}, {trainer.step} steps done"
    elif cfg.max_steps is None and trainer.epoch >= cfg.epochs:
        budget = f"train.epochs {cfg.epochs}, {trainer.epoch} done"
    elif trainer.should_stop:
        budget = "a callback or a diverged loss set trainer.should_stop"
    else:
        return
    raise AccelError(
        f"nothing left to train: this trainer's budget is spent ({budget}). To train further, "
        "raise train.epochs or train.max_steps (trainer.cfg in Python, --set on the command line) "
        "and fit again; to start over, build a new Trainer."
    )
