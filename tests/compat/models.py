"""Models written the way code from other trainers is written, for tests that check accel trains them unchanged.

They call `.view()` on what they are given, as minimal trainers' model files do: `.view()` works only on a
tensor whose memory layout allows it (a contiguous one always does), so a batch of strided views fails here the
way it fails in a user's model. Recipes name them by import string, with the repository root on `sys.path`
(pytest puts it there, see `pythonpath` in pyproject.toml; `python -m accel.cli` run from the root does too):

    model: {name: "tests.compat.models:build"}          # ViewGPT, for (inputs, targets) token windows
    model: {name: "tests.compat.models:build_causal_lm"} # ViewCausalLM, for {"input_ids", "labels"} dicts
    model: {name: "tests.compat.models:build_mlp", args: {image_size: 8}}  # ViewMLP, for images
    model: {name: "tests.compat.models:build_cnn"}      # ViewCNN, for images, channels_last included
    task: {name: "tests.compat.models:loss"}            # any of them, any of those batches
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    """Causal self-attention as minimal GPT trainers write it: `.view()` into heads, `.contiguous().view()` back."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(width), SelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ViewGPT(nn.Module):
    """A tiny GPT with a minimal trainer's contract: `forward(idx, targets=None) -> (logits, loss)`, the loss
    computed on `logits.view(-1, vocab)` and `targets.view(-1)`."""

    def __init__(self, vocab_size: int, context: int, width: int = 32, depth: int = 1, heads: int = 2):
        super().__init__()
        self.token = nn.Embedding(vocab_size, width)
        self.position = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size, bias=False)

    def logits(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.size()
        x = self.token(idx) + self.position(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        logits = self.logits(idx)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


class ViewCausalLM(ViewGPT):
    """The Hugging Face contract on the same network: `forward(input_ids, labels=None) -> {"logits", "loss"}`,
    labels unshifted (the model shifts them), flattened with `.view()` before the shift."""

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, Any]:
        b, t = input_ids.size()
        logits = self.logits(input_ids.view(b, t))
        if labels is None:
            return {"logits": logits, "loss": None}
        flat = labels.view(-1)
        shifted = torch.cat([flat[1:], flat.new_full((1,), -100)]).view(b, t)
        shifted[:, -1] = -100  # a window's last position has no next token inside the window
        return {"logits": logits, "loss": F.cross_entropy(logits.view(b * t, -1), shifted.view(-1))}


# The image models return logits alone when called without targets (as `task: classification` calls them),
# (logits, loss) with them (as `loss` below does).
def _image_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # class indices, or class probabilities once mixup/cutmix ran
    y = targets.view(-1) if targets.dim() == 1 else targets.view(len(targets), -1)
    return F.cross_entropy(logits, y)


class ViewMLP(nn.Module):
    """An image classifier in the style of minimal MNIST scripts: `x.view(len(x), -1)` flattens the NCHW batch.
    That layout is the contract: under the channels_last speed-up the batch is NHWC and `.view()` cannot flatten
    it (use ViewCNN there)."""

    def __init__(self, num_classes: int, in_channels: int, image_size: int, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_channels * image_size**2, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> Any:
        logits = self.net(x.view(x.size(0), -1))
        return logits if targets is None else (logits, _image_loss(logits, targets))


class ViewCNN(nn.Module):
    """A convolutional classifier whose head flattens pooled features with `.view()` (valid in either memory
    format: the pooled map is 1x1), so it trains with and without channels_last."""

    def __init__(self, num_classes: int, in_channels: int, width: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, width, 3, padding=1)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> Any:
        pooled = F.adaptive_avg_pool2d(F.relu(self.conv(x)), 1)
        logits = self.fc(pooled.view(pooled.size(0), -1))
        return logits if targets is None else (logits, _image_loss(logits, targets))


def build(vocab_size: int, context: int, **kwargs: Any) -> ViewGPT:
    return ViewGPT(vocab_size, context, **kwargs)


def build_causal_lm(vocab_size: int, context: int, **kwargs: Any) -> ViewCausalLM:
    return ViewCausalLM(vocab_size, context, **kwargs)


def build_mlp(num_classes: int, in_channels: int, image_size: int, **kwargs: Any) -> ViewMLP:
    return ViewMLP(num_classes, in_channels, image_size, **kwargs)


def build_cnn(num_classes: int, in_channels: int, **kwargs: Any) -> ViewCNN:
    return ViewCNN(num_classes, in_channels, **kwargs)


def loss(model: nn.Module, batch: Any) -> torch.Tensor:
    """A task function (`task: {name: "tests.compat.models:loss"}`): `model(inputs, targets)`'s loss for
    `(inputs, targets)` batches, `model(**batch)["loss"]` for dict batches."""
    if isinstance(batch, Mapping):
        return model(**batch)["loss"]
    inputs, targets = batch
    return model(inputs, targets)[1]


@dataclass
class Scores:
    """What a user's model may return instead of a tensor: an output object with `logits` (Hugging Face style)."""

    logits: torch.Tensor
    features: torch.Tensor


class OutputCNN(ViewCNN):
    """ViewCNN whose forward returns a dict (`{"logits", "features"}`) or a dataclass (`Scores`), as `returns` says;
    `task: classification` reads the logits out of either."""

    def __init__(self, num_classes: int, in_channels: int, returns: str = "dict", width: int = 8):
        super().__init__(num_classes, in_channels, width)
        self.returns = returns

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> Any:
        features = F.adaptive_avg_pool2d(F.relu(self.conv(x)), 1).flatten(1)
        logits = self.fc(features)
        return {"logits": logits, "features": features} if self.returns == "dict" else Scores(logits, features)


def build_output_cnn(num_classes: int, in_channels: int, **kwargs: Any) -> OutputCNN:
    return OutputCNN(num_classes, in_channels, **kwargs)
