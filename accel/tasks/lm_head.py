"""The seam between a language model and a loss that never materialises its logits: the model hands over its final
hidden states and the output layer that would have turned them into logits.

A model offers them by two methods: `get_output_embeddings()` returns the `nn.Linear` that makes the logits (its
weight may be the token embedding's: tied weights get their gradient once, through the one parameter), and
`forward(inputs, return_hidden=True)` returns what that layer takes, `[B, T, C]`. accel's GPT has both. Hugging
Face causal LMs are asked with `output_hidden_states=True, logits_to_keep=1` (the logits of one position only).
The model is called through its wrappers (torch.compile, DDP), so their hooks run as for a plain forward.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from ..errors import AccelError
from ..strategy.sharding import is_sharded

HIDDEN = "return_hidden"  # the forward keyword of accel's own models
# Hugging Face config keys that change the logits after the output layer (softcapping, a scale): a loss on the
# layer's output alone would train another model
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def plain_module(model: nn.Module) -> nn.Module:
    """The user's module inside torch.compile's and DDP's wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def hidden_and_head(model: nn.Module, inputs: torch.Tensor) -> tuple[torch.Tensor, nn.Linear]:
    """The final hidden states `[B, T, C]` of `model` on `inputs`, and the output layer they feed."""
    module = plain_module(model)
    head = _output_layer(module)
    if _is_hugging_face(module):
        _check_plain_logits(module)
        hidden = model(inputs, output_hidden_states=True, logits_to_keep=1).hidden_states[-1]
    else:
        hidden = model(inputs, **{HIDDEN: True})
    if not isinstance(hidden, torch.Tensor) or hidden.shape[-1] != head.in_features:
        raise AccelError(
            f"task.fused_loss: {type(module).__name__}(inputs, {HIDDEN}=True) returned "
            f"{_describe(hidden)}, not the output layer's input [B, T, {head.in_features}]"
        )
    return hidden, head


def _output_layer(module: nn.Module) -> nn.Linear:
    name = type(module).__name__
    if is_sharded(module):
        raise AccelError(
            "task.fused_loss does not run with strategy fsdp: the output layer's weight is sharded outside the "
            "model's forward. Use strategy ddp, or set task.fused_loss: false"
        )
    head = module.get_output_embeddings() if hasattr(module, "get_output_embeddings") else None
    if not isinstance(head, nn.Linear):
        raise AccelError(
            f"task.fused_loss needs the model's hidden states and output layer, and {name} has no "
            "`get_output_embeddings()` returning the nn.Linear that makes its logits. Add it, and a "
            f"`forward(inputs, {HIDDEN}=True)` that returns that layer's input; or set task.fused_loss: false"
        )
    if not _is_hugging_face(module) and HIDDEN not in inspect.signature(module.forward).parameters:
        raise AccelError(
            f"task.fused_loss: {name}.forward takes no `{HIDDEN}` argument. With {HIDDEN}=True it should return "
            "the hidden states its output layer takes instead of the logits; or set task.fused_loss: false"
        )
    return head


def _is_hugging_face(module: nn.Module) -> bool:
    """A transformers PreTrainedModel, recognised without importing transformers."""
    return hasattr(module, "config") and hasattr(module, "base_model_prefix")


def _check_plain_logits(module: nn.Module) -> None:
    for key in LOGIT_TRANSFORMS:
        value = getattr(module.config, key, None)
        if value not in (None, 1, 1.0):
            raise AccelError(
                f"task.fused_loss: {type(module).__name__} changes its logits after the output layer "
                f"(config.{key} = {value}), which the fused loss does not do; set task.fused_loss: false"
            )


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    return f"a {type(value).__name__}"
