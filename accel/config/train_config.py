"""The loop's own settings (a recipe's `train:` section), kept beside the trainer: importing the trainer does
not import the recipe, nor every model and dataset it can name."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..schema import StrictModel


class EarlyStoppingConfig(StrictModel):
    monitor: str = Field("val_loss", description="epoch metric to watch")
    mode: Literal["min", "max"] = Field("min", description="whether smaller or larger is better")
    patience: int = Field(3, ge=1, description="epochs without improvement before stopping")
    min_delta: float = Field(0.0, ge=0, description="smallest change that counts as an improvement")


class TrainConfig(StrictModel):
    epochs: int = Field(1, ge=1, description="passes over the training data")
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer steps (wins over epochs)")
    grad_accum: int = Field(1, ge=1, description="micro-batches accumulated per optimizer step")
    clip_grad_norm: float | None = Field(None, gt=0, description="clip the global gradient norm to this value")
    eval_every_epochs: int = Field(1, ge=0, description="evaluate every N epochs (0: only at the end)")
    eval_max_batches: int | None = Field(
        None,
        ge=1,
        description="evaluate on at most this many validation "
        "batches (the bench's trials: the same subset for every variant)",
    )
    eval_every_steps: int | None = Field(
        None,
        ge=1,
        description="also evaluate every N optimizer steps, logged as "
        "`eval` records (time to a target, long single-epoch runs)",
    )
    sync_every_step: bool = Field(
        False, description="synchronise the device after every step so per-step times are exact (the bench does this)"
    )
    early_stopping: EarlyStoppingConfig | None = Field(None, description="stop when a metric stops improving")
    lint_ignore: list[str] = Field(
        [],
        description="speed-lint findings (by code, e.g. fp32-with-fast-bf16) this "
        "run, and `accel doctor` with this recipe, should not report: for a setting "
        "chosen on purpose",
    )
