"""Seeding and RNG state capture, kept in plain tensors so checkpoints load with weights_only=True."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

RANK_SEED_STRIDE = 1_000_003  # a prime: rank r's seeds never meet rank r+1's within a million steps or trials


def rank_seed(seed: int, rank: int) -> int:
    """The seed of process `rank` in a run seeded `seed`: rank 0 keeps `seed`, the others draw streams of their
    own (identical random augmentation on every rank would waste the data parallelism)."""
    return seed + RANK_SEED_STRIDE * rank


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": pos,
            "has_gauss": has_gauss,
            "cached": cached,
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
