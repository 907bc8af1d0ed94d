"""A small GPT and its data, as minimal GPT trainers keep them beside their train.py (nanoGPT's model.py): the
model has a `config`, `generate` and `estimate_mfu` of its own, and the data are bytes in memory-mapped files."""

from __future__ import annotations

import math
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 256  # bytes
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(config.n_embd), nn.LayerNorm(config.n_embd)
        self.attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(), nn.Linear(4 * config.n_embd, config.n_embd)
        )
        self.n_head = config.n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits[:, [-1], :], None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def estimate_mfu(self, fwdbwd_per_iter: int, dt: float, peak_flops: float) -> float:
        """Model FLOPs utilisation, as nanoGPT's model.py estimates it (6N + attention per token)."""
        n = sum(p.numel() for p in self.parameters())
        cfg = self.config
        per_token = 6 * n + 12 * cfg.n_layer * cfg.n_head * (cfg.n_embd // cfg.n_head) * cfg.block_size
        return per_token * cfg.block_size * fwdbwd_per_iter / dt / peak_flops

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.config.block_size :])
            idx = torch.cat((idx, torch.multinomial(F.softmax(logits[:, -1, :], dim=-1), 1)), dim=1)
        return idx


def prepare_bytes(folder: str | Path, megabytes: float = 2.0) -> tuple[np.memmap, np.memmap]:
    """train.bin and val.bin (the last 10%) of the Python standard library's own source, as bytes: real text on
    every machine, nothing downloaded. Written once; memory-mapped as nanoGPT's data are."""
    folder = Path(folder)
    if not (folder / "val.bin").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        stdlib = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
        text = b"".join(p.read_bytes() for p in stdlib)[: int(megabytes * 1e6)]
        cut = math.floor(len(text) * 0.9)
        np.frombuffer(text[:cut], dtype=np.uint8).tofile(folder / "train.bin")
        np.frombuffer(text[cut:], dtype=np.uint8).tofile(folder / "val.bin")
    return tuple(np.memmap(folder / f"{split}.bin", dtype=np.uint8, mode="r") for split in ("train", "val"))
