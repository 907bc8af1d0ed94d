"""Per-rank seeds: rank 0 keeps the recipe's seed, every other rank a stream of its own."""

from __future__ import annotations

from accel.runs.rng import rank_seed


def test_rank_zero_keeps_the_seed_and_other_ranks_differ():
    assert rank_seed(7, 0) == 7
    seeds = {rank_seed(7, rank) + step for rank in range(4) for step in range(100_000)}
    assert len(seeds) == 4 * 100_000  # a resumed rank re-seeds at seed + step: no two ranks meet
