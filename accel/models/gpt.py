"""A small GPT: pre-norm transformer blocks with causal self-attention through
`torch.nn.functional.scaled_dot_product_attention`, so the fastest attention kernel for the device (flash,
memory-efficient, cuDNN, or the math fallback on a CPU) runs without a line of ours."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..registry import MODELS


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        if width % heads:
            raise ValueError(f"gpt: width {width} is not divisible by heads {heads}")
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(width), CausalSelfAttention(width, heads, dropout)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width, bias=False), nn.GELU(), nn.Linear(4 * width, width, bias=False)
        )
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.mlp(self.norm2(x)))


class GPT(nn.Module):
    """Token ids `[B, T]` (T <= context) -> next-token logits `[B, T, vocab_size]`. The output layer shares the
    token embedding's weights. `return_hidden=True` returns the output layer's input `[B, T, width]` instead, for
    a loss that never materialises the logits (task.fused_loss; accel/tasks/lm_head.py)."""

    def __init__(
        self, vocab_size: int, context: int, width: int = 192, depth: int = 4, heads: int = 4, dropout: float = 0.0
    ):
        super().__init__()
        self.context = context
        self.embed = nn.Embedding(vocab_size, width)
        self.position = nn.Parameter(torch.zeros(context, width))
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size, bias=False)
        self.head.weight = self.embed.weight
        self._init_weights(depth)

    def _init_weights(self, depth: int) -> None:
        for name, param in self.named_parameters():
            if param.dim() < 2:
                continue  # LayerNorm weights and biases keep their defaults (1, 0)
            # the residual branches' output layers shrink with depth, so the residual stream's variance stays put
            residual = name.endswith("attn.proj.weight") or name.endswith("mlp.2.weight")
            nn.init.normal_(param, std=0.02 / math.sqrt(2 * depth) if residual else 0.02)

    def get_output_embeddings(self) -> nn.Linear:
        """The layer that makes the logits (Hugging Face's name for it)."""
        return self.head

    def forward(self, idx: torch.Tensor, return_hidden: bool = False) -> torch.Tensor:
        length = idx.shape[1]
        if length > self.context:
            raise ValueError(f"gpt: a sequence of {length} tokens is longer than the model's context {self.context}")
        x = self.embed(idx) + self.position[:length]
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        return x if return_hidden else self.head(x)


@MODELS.register("gpt")
def gpt(vocab_size: int, context: int, width: int = 192, depth: int = 4, heads: int = 4, dropout: float = 0.0) -> GPT:
    """A GPT sized by `width`, `depth` and `heads`; vocab_size and context come from the dataset."""
    return GPT(vocab_size, context, width, depth, heads, dropout)
