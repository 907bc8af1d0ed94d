"""What gets exported: a run's trained model, wrapped to take what a user feeds in production.

A language model takes token ids as the validation loader yields them and returns logits per position; an
image classifier is wrapped as below.

The exported graph takes exactly what the validation loader yields, normally uint8 NCHW images, and does the
`(x / 255 - mean) / std` normalisation inside, as training did. A user then ships one file and feeds decoded
images; no mean/std constants can be forgotten or mistyped on the serving side. export.json still records
the constants. Datasets that yield float images are passed through unchanged, as the trainer's Normalize does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..config.recipe import Recipe, load_recipe
from ..registry import SPEEDUPS
from ..runs import sharded_checkpoint
from ..runs.checkpoint import check_same_model, load_checkpoint
from ..runs.rundir import CHECKPOINTS, RunDir
from .errors import ExportError

log = logging.getLogger("accel")


class ImageClassifier(nn.Module):
    """`model` behind the trainer's eval transform: uint8 images in, logits out (float input is used as is)."""

    def __init__(self, model: nn.Module, mean: tuple[float, ...], std: tuple[float, ...], fold_normalize: bool):
        super().__init__()
        self.model = model
        self.fold_normalize = fold_normalize
        mean_t = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        std_t = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        # the same fused multiply-add as accel.data.normalize.Normalize, so logits match training's evaluation
        self.register_buffer("scale", 1.0 / (255.0 * std_t))
        self.register_buffer("shift", -mean_t / std_t)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.fold_normalize:
            images = torch.addcmul(self.shift, images.float(), self.scale)
        return self.model(images)


@dataclass
class Source:
    """A trained run, ready to export: the recipe, the plain model with its weights, and the data loaders."""

    run_dir: Path
    checkpoint: Path
    recipe: Recipe
    model: nn.Module
    train_loader: Any
    val_loader: Any
    mean: tuple[float, ...]
    std: tuple[float, ...]
    example: torch.Tensor = field(repr=False)  # a few real validation inputs, as the loader yields them
    weights: str = "trained"  # or the speed-up whose weights the run evaluated ("ema": the averaged weights)

    @property
    def tokens(self) -> bool:
        return self.recipe.task.name == "language_model"

    @property
    def input_name(self) -> str:
        return "tokens" if self.tokens else "images"

    def servable(self, model: nn.Module | None = None) -> nn.Module:
        """`model` (default: the trained one) taking what the loader yields: an image classifier wrapped to
        normalise loader images, a language model as it is; in eval mode, on the CPU."""
        model = model or self.model
        if not self.tokens:
            model = ImageClassifier(model, self.mean, self.std, self.example.dtype == torch.uint8)
        return model.eval().cpu()

    def input_spec(self) -> dict[str, Any]:
        """What the exported graph takes, for export.json and the docs."""
        if self.tokens:
            return {
                "name": "tokens",
                "dtype": str(self.example.dtype).removeprefix("torch."),
                "shape": ["batch", *self.example.shape[1:]],
                "normalisation": "none: token ids",
            }
        folded = self.example.dtype == torch.uint8
        return {
            "name": "images",
            "dtype": str(self.example.dtype).removeprefix("torch."),
            "shape": ["batch", *self.example.shape[1:]],
            "normalisation": "inside the graph: (images / 255 - mean) / std"
            if folded
            else "none: float images are used as given (normalise them as in training)",
            "mean": list(self.mean),
            "std": list(self.std),
        }


def locate(path: str | Path) -> tuple[Path, Path]:
    """(run directory, checkpoint) for a run directory or a checkpoint file inside one."""
    path = Path(path)
    if path.is_file():
        run_dir = path.parent.parent if path.parent.name == CHECKPOINTS else path.parent
        return run_dir, path
    if not path.is_dir():
        raise ExportError(
            f"{path} does not exist. Give a run directory (from `accel train --out DIR`) or a "
            "checkpoint file inside one (DIR/checkpoints/last.pt)."
        )
    run = RunDir(path, create=False)
    checkpoint = run.resume_checkpoint()  # last.pt, or a sharded checkpoint's folder (strategy fsdp)
    if not run.has_checkpoint():
        raise ExportError(
            f"Run directory {path} has no checkpoint ({checkpoint} is missing). Train it to the end "
            "(`accel train RECIPE --out DIR`; checkpoints are written every `checkpoint.every_epochs`"
            "), or pass a checkpoint file directly."
        )
    return path, checkpoint


def load_source(path: str | Path) -> Source:
    """Rebuild a run's model and data from its recipe.yaml and load the checkpoint's weights (weights_only)."""
    from ..train.run import build_trainer

    run_dir, checkpoint = locate(path)
    recipe_path = RunDir(run_dir, create=False).recipe
    if not recipe_path.is_file():
        raise ExportError(
            f"No recipe.yaml next to {checkpoint}: expected {recipe_path}. Export needs the run's "
            "recipe to rebuild the model and its data; pass the run directory that holds both."
        )
    trained = load_recipe(recipe_path)
    _check_exportable(trained, run_dir, checkpoint)
    trainer = build_trainer(cpu_recipe(trained))
    state = sharded_checkpoint.whole(checkpoint, trainer.module) if checkpoint.is_dir() else load_checkpoint(checkpoint)
    check_same_model(state["model_signature"], trainer.module, checkpoint)
    weights, which = _evaluated_weights(state, trained)
    trainer.module.load_state_dict(weights)
    if trainer.val_loader is None:
        raise ExportError(
            f"The recipe in {run_dir} has no validation split (`data.dataset.val_fraction: 0`), "
            "so the export cannot be checked against the original. Export a run with validation data."
        )
    normalize = trainer.eval_transform  # None for token data
    inputs = next(iter(trainer.val_loader))[0]
    example = torch.cat([inputs[:2], inputs[:2]])[:2]  # two samples: a batch of 1 would fix the batch size
    mean, std = (_constants(normalize.mean), _constants(normalize.std)) if normalize is not None else ((), ())
    return Source(
        run_dir,
        checkpoint,
        trained,
        trainer.module.eval(),
        trainer.train_loader,
        trainer.val_loader,
        mean,
        std,
        example,
        which,
    )


def _check_exportable(recipe: Recipe, run_dir: Path, checkpoint: Path) -> None:
    """Image classifiers and language models on token tensors export; anything else is refused, saying where
    the weights are."""
    where = (
        f"Its weights are in {checkpoint} (`model` holds the state_dict) for torch.onnx.export or "
        "torch.export with your own example input."
    )
    task = recipe.task.name
    if task not in ("classification", "language_model"):
        raise ExportError(
            f"`accel export` exports image classifiers and language models; the run in {run_dir} "
            f"trained task `{task}`. {where}"
        )
    if task == "language_model" and getattr(recipe.data.dataset, "layout", "pairs") != "pairs":
        raise ExportError(
            f"`accel export` exports language models that take a tensor of token ids; the run in "
            f"{run_dir} feeds dict batches (`layout: hf`), whose models return output objects. {where}"
        )


def _evaluated_weights(state: dict[str, Any], recipe: Recipe) -> tuple[dict[str, Any], str]:
    """The weights the run evaluated: a speed-up's own (the `ema` average) when it evaluated with them
    (`Speedup.evaluated_weights`), else the trained ones. Shipping the other set would not be the model whose
    accuracy the run reported."""
    saved = state.get("speedups", {})
    for name, config in recipe.speedups.items():
        weights = SPEEDUPS.get(name).evaluated_weights(config, saved.get(name) or {}) if config.enabled else None
        if weights is not None:
            log.info("exporting the weights of speed-up %s, which the run evaluated", name)
            return weights, name
    return state["model"], "trained"


def _constants(values: torch.Tensor) -> tuple[float, ...]:
    """float32 values written as the shortest decimals that read back to them: 0.1307, not 0.1307000070810318."""
    return tuple(float(np.format_float_positional(v, unique=True)) for v in values.flatten().numpy())


def cpu_recipe(recipe: Recipe) -> Recipe:
    """The recipe on the CPU without speed-ups: export and its measurements are plain CPU inference. The model's
    pretrained `weights` file is not read: the checkpoint holds the trained weights (and the file may be gone)."""
    return recipe.model_copy(
        update={"device": "cpu", "speedups": {}, "strict": False, "model": recipe.model.without_weights()}
    )
