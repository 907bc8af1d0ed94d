"""EpochSampler: order from (seed, epoch) alone, resumable with `skip`, shardable across ranks."""

from __future__ import annotations

import pytest
import torch

from accel.data.sampler import EpochSampler, epoch_seed


def order(n=50, epoch=0, seed=0, skip=0, **kw) -> list[int]:
    sampler = EpochSampler(n, shuffle=kw.pop("shuffle", True), seed=seed, **kw)
    sampler.set_epoch(epoch, skip)
    return list(sampler)


def test_same_seed_and_epoch_give_the_same_order_whatever_the_global_rng():
    torch.manual_seed(1)
    first = order(epoch=3)
    torch.manual_seed(2)
    torch.rand(10)
    assert order(epoch=3) == first
    assert sorted(first) == list(range(50)) and first != list(range(50))


def test_epoch_and_seed_change_the_order():
    assert order(epoch=0) != order(epoch=1)
    assert order(seed=0) != order(seed=1)
    assert order(seed=0, epoch=1) != order(seed=1, epoch=0)  # no seed + epoch aliasing
    assert epoch_seed(0, 1) != epoch_seed(1, 0) and epoch_seed(-5, 0) >= 0


def test_no_shuffle_is_in_order():
    assert order(10, shuffle=False) == list(range(10))


def test_skip_gives_the_tail_and_resets_next_epoch():
    sampler = EpochSampler(50, shuffle=True, seed=7)
    sampler.set_epoch(2)
    full = list(sampler)
    sampler.set_epoch(2, skip=20)
    assert list(sampler) == full[20:] and len(sampler) == 30
    sampler.set_epoch(3)
    assert len(sampler) == 50 and len(list(sampler)) == 50


@pytest.mark.parametrize("n, world", [(12, 3), (10, 3), (2, 4), (7, 1)])
def test_shards_are_disjoint_and_cover_everything(n, world):
    shards = [order(n, epoch=1, rank=r, world_size=world) for r in range(world)]
    per_rank = -(-n // world)
    assert all(len(s) == per_rank for s in shards)  # equal batch counts keep ranks in lockstep
    flat = [i for s in shards for i in s]
    assert set(flat) == set(range(n))
    assert len(flat) - len(set(flat)) == per_rank * world - n  # only the padding repeats
    if n % world == 0:
        assert len(set(flat)) == len(flat)


def test_rank_skip_applies_to_that_rank_only():
    full = order(10, rank=1, world_size=2)
    sampler = EpochSampler(10, shuffle=True, seed=0, rank=1, world_size=2)
    sampler.set_epoch(0, skip=3)
    assert list(sampler) == full[3:] and len(sampler) == 2


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="rank"):
        EpochSampler(10, shuffle=True, seed=0, rank=2, world_size=2)
    with pytest.raises(ValueError, match="skip"):
        EpochSampler(10, shuffle=True, seed=0).set_epoch(0, skip=11)
    with pytest.raises(ValueError, match="at least one sample"):
        EpochSampler(0, shuffle=True, seed=0)
