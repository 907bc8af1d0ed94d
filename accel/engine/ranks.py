"""What a hand-written loop of several processes needs from its engine: a seed per rank (`seed_everything`), a print
on rank 0 only (`print`), and the check that the ranks did not train on the same batches.

A loop that samples its own batches after `torch.manual_seed(1337)` on every rank (nanoGPT's `get_batch`, without
its `seed_offset`) draws the same batches on each: N processes then do the work of one, and nothing fails. The
engine keeps a checksum of each rank's first training batch (a few thousand of its numbers, on the device) and, at
the first optimizer step, which every rank reaches together, compares them once with an all_gather of one small
tensor per rank.
"""

from __future__ import annotations

import builtins
import logging
import math
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..batches import leading_tensor
from ..runs.rng import rank_seed
from ..runs.rng import seed_everything as seed_everything_with

if TYPE_CHECKING:
    from ..strategy.world import World

log = logging.getLogger("accel")
CHECKED_NUMBERS = 4096  # of the first batch's first tensor, evenly spread: enough to tell two batches apart


def checksum(tensor: torch.Tensor) -> torch.Tensor:
    """Two numbers that differ for different batches: the sum of an even sample of the tensor's values, and the
    same weighted by position (a permutation of the same samples reads apart)."""
    flat = tensor.detach().flatten()
    flat = flat[:: max(1, flat.numel() // CHECKED_NUMBERS)].float()
    weights = torch.arange(1, flat.numel() + 1, device=flat.device, dtype=flat.dtype) / max(flat.numel(), 1)
    return torch.stack([flat.sum(), (flat * weights).sum()])


def same_as(sums: list[list[float]], rank: int) -> list[int]:
    """The other ranks whose first batch's checksum equals `rank`'s (a rank that counted no batch has NaN)."""
    mine = sums[rank]
    if any(math.isnan(value) for value in mine):
        return []
    return [r for r, other in enumerate(sums) if r != rank and other == mine]


def seed_everything(world: World, seed: int, per_rank: bool) -> int:
    """`eng.seed_everything`: rank r gets `rank_seed(seed, r)` with `per_rank`, every rank `seed` without."""
    used = rank_seed(seed, world.rank) if per_rank else seed
    seed_everything_with(used)
    return used


def print_once(world: World, *args: Any, **kwargs: Any) -> None:
    """`eng.print`: on rank 0 only."""
    if world.is_main:
        builtins.print(*args, **kwargs)


def first_batch_sum(inputs: Any) -> torch.Tensor | None:
    """The first training batch's checksum, kept on the device (no sync) until the first optimizer step."""
    leading = leading_tensor(inputs)
    return checksum(leading) if leading is not None else None


def check_drew_apart(world: World, device: torch.device, mine: torch.Tensor | None) -> None:
    """At the first optimizer step, on every rank at once: warn when two ranks' first batches (`mine`: this rank's
    checksum) were the same."""
    if not world.distributed:
        return
    mine = torch.full((2,), float("nan"), device=device) if mine is None else mine.to(device)
    gathered = [torch.empty_like(mine) for _ in range(world.size)]
    dist.all_gather(gathered, mine)
    same = same_as([t.tolist() for t in gathered], 0)
    if world.is_main and same:
        log.warning(drew_the_same(same))


def drew_the_same(ranks: list[int]) -> str:
    others = ", ".join(str(r) for r in ranks)
    return (
        f"rank 0 and rank(s) {others} trained on the same first batch: every rank draws the same batches, so the "
        "processes repeat one another's work (a loop that samples its own batches after torch.manual_seed(S) on "
        "every rank). Seed each rank apart with eng.seed_everything(S) in place of torch.manual_seed(S) (rank r "
        "gets a stream of its own; DDP still starts every rank from rank 0's weights), or give the loop's "
        "DataLoader to eng.setup_dataloaders, which gives each rank its own shard"
    )
