"""Global magnitude pruning of Conv/Linear weights, made permanent, with optional short fine-tuning.

Unstructured zeros do not make dense kernels faster or dense files smaller; export.json shows this honestly
(latency and `size_bytes` barely move) and reports `gzip_bytes`, where the zeros do pay off.
"""

from __future__ import annotations

import copy
import logging

import torch
from torch import nn
from torch.nn.utils import prune

from .errors import ExportError
from .source import Source, cpu_recipe

log = logging.getLogger("accel")
PRUNABLE = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)
Masks = dict[str, torch.Tensor]


def prunable(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, layer) of every layer whose `weight` pruning considers."""
    return [(name, module) for name, module in model.named_modules() if isinstance(module, PRUNABLE)]


def prune_global(model: nn.Module, amount: float) -> tuple[nn.Module, Masks]:
    """A copy of `model` with the `amount` fraction of smallest-magnitude weights, counted over all layers
    together, set to zero for good; also the masks (1 = kept) by layer name."""
    pruned = copy.deepcopy(model)
    layers = prunable(pruned)
    if not layers:
        raise ExportError(f"--prune needs Conv or Linear layers; {type(model).__name__} has none.")
    # global, not per layer: layers with many small weights give up more, which costs less accuracy
    prune.global_unstructured([(layer, "weight") for _, layer in layers], prune.L1Unstructured, amount=amount)
    masks = {name: layer.weight_mask.detach().clone() for name, layer in layers}
    make_permanent(pruned)
    return pruned, masks


def make_permanent(model: nn.Module) -> None:
    """Fold the masks into the weights and drop pruning's hooks and buffers: a plain module again."""
    for _, layer in prunable(model):
        if prune.is_pruned(layer):
            prune.remove(layer, "weight")


def sparsity(model: nn.Module) -> dict[str, float | int]:
    """Zeros among the prunable weights, overall."""
    weights = [layer.weight.detach() for _, layer in prunable(model)]
    total = sum(w.numel() for w in weights)
    zeros = sum(int((w == 0).sum()) for w in weights)
    return {"weights": total, "zeros": zeros, "sparsity": zeros / max(total, 1)}


def finetune(source: Source, model: nn.Module, masks: Masks, steps: int) -> tuple[nn.Module, dict]:
    """`steps` optimizer steps of the recipe's training (data, loss, optimizer, schedule squeezed into `steps`)
    on a copy of `model`, with the masks held so pruned weights stay zero; returns the model and the summary."""
    from ..train.run import build_trainer

    recipe = cpu_recipe(source.recipe)
    train = recipe.train.model_copy(update={"max_steps": steps, "eval_every_epochs": 0, "early_stopping": None})
    trainer = build_trainer(recipe.model_copy(update={"train": train}))
    trainer.module.load_state_dict(model.state_dict())
    for name, layer in prunable(trainer.module):
        # the optimizer holds the weight Parameter, which pruning keeps as weight_orig: it is still trained
        prune.custom_from_mask(layer, "weight", masks[name])
    log.info("fine-tuning the pruned model for %d steps", steps)
    trainer.fit()
    make_permanent(trainer.module)
    return trainer.module.eval(), {"steps": trainer.summary.steps, "train_loss": trainer.summary.metrics["train_loss"]}
