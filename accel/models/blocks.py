"""What a model is made of: its repeated blocks (a transformer's layers), what activation checkpointing and
regional compilation work on, and the traits that say which speed-ups can help it."""

from __future__ import annotations

import functools
import inspect

from torch import nn


def repeated_blocks(model: nn.Module, classes: list[str] = ()) -> list[nn.Module]:
    """The modules of the named classes, or else the members of every container of same-class modules
    (outermost first; blocks inside a chosen block are not chosen again)."""
    if classes:
        return [m for m in model.modules() if type(m).__name__ in classes]
    chosen: list[nn.Module] = []
    inside: set[int] = set()
    for module in model.modules():
        if id(module) in inside or not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(module.children())
        same_class = len(children) >= 2 and len({type(child) for child in children}) == 1
        if same_class and any(True for _ in children[0].parameters()):  # blocks with weights, not a row of ReLUs
            chosen += children
            inside.update(id(m) for c in children for m in c.modules())
    return chosen


# trait -> (what the model has, the short word in a speed-lint code: `channels-last-without-conv`)
TRAITS = {
    "has_conv": ("convolutions", "conv"),
    "has_attention": ("attention modules", "attention"),
    "repeated_blocks": ("repeated blocks", "repeated-blocks"),
}
CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


@functools.cache
def _calls_sdpa(kind: type) -> bool:
    """A module whose own forward calls `scaled_dot_product_attention` (nanoGPT's pattern: the attention inline in
    a block), which the attention kernel's `sdpa_kernel` context reaches as it reaches a named attention module."""
    if kind.__module__.startswith("torch."):
        return False
    try:
        return "scaled_dot_product_attention" in inspect.getsource(kind.forward)
    except (OSError, TypeError):  # no source: a compiled or built-in forward
        return False


def model_traits(model: nn.Module) -> dict[str, bool]:
    """Convolutions (channels_last), attention modules (an attention kernel), repeated blocks (regional
    compile, activation checkpointing)."""
    modules = list(model.modules())
    return {
        "has_conv": any(isinstance(m, CONV) for m in modules),
        "has_attention": any(
            isinstance(m, nn.MultiheadAttention) or type(m).__name__.endswith("Attention") or _calls_sdpa(type(m))
            for m in modules
        ),
        "repeated_blocks": bool(repeated_blocks(model)),
    }
