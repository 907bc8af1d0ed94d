"""Batch augmentation: each op against its definition on small tensors, per-sample draws, seeding, configs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from accel.config.recipe_yaml import parse_value
from accel.data import augment as A
from accel.data.augment import AugmentConfig, AugmentOp, AugmentState, BatchAugment, CollateAugment, build_augment
from accel.data.loaders import LoaderConfig, build_loader
from accel.data.normalize import Normalize
from accel.errors import DataError

from .test_loaders import memory_dataset

CPU = torch.device("cpu")


def batch(n: int = 4, c: int = 2, h: int = 5, w: int = 6) -> torch.Tensor:
    return torch.arange(n * c * h * w, dtype=torch.float32).view(n, c, h, w)


# ---- the pure functions against their definitions ---------------------------------------------------------
def test_crop_is_a_window_of_the_zero_padded_image():
    x = batch()
    top, left = torch.tensor([0, 1, 4, 2]), torch.tensor([0, 3, 2, 5])
    out = A.crop(x, 3, 2, top, left)
    padded = F.pad(x, (2, 2, 2, 2))
    assert out.shape == (4, 2, 3, 3) and out.is_contiguous()
    for i in range(4):
        t, l_ = int(top[i]), int(left[i])
        assert torch.equal(out[i], padded[i, :, t : t + 3, l_ : l_ + 3])
    assert out[0, :, :2, :].eq(0).all()  # window at (0, 0) starts in the padding


def test_hflip_mirrors_only_the_chosen_samples():
    x = batch()
    out = A.hflip(x, torch.tensor([True, False, True, False]))
    assert torch.equal(out[0], x[0].flip(-1)) and torch.equal(out[2], x[2].flip(-1))
    assert torch.equal(out[1], x[1]) and torch.equal(out[3], x[3])


def test_cutout_zeroes_the_clipped_square_of_chosen_samples():
    x = batch() + 1  # no zeros before cutout
    out = A.cutout(
        x,
        3,
        cy=torch.tensor([2, 0, 4, 2]),
        cx=torch.tensor([2, 0, 5, 2]),
        apply=torch.tensor([True, True, True, False]),
    )
    expected = x.clone()
    expected[0, :, 1:4, 1:4] = 0  # centre (2, 2), size 3
    expected[1, :, 0:2, 0:2] = 0  # centre (0, 0): clipped at the top-left corner
    expected[2, :, 3:5, 4:6] = 0  # centre (4, 5): clipped at the bottom-right corner
    assert torch.equal(out, expected)  # sample 3 not chosen: unchanged


def test_mix_blends_each_sample_with_its_neighbour():
    x, y = batch(3), torch.eye(3)
    lam = torch.tensor([1.0, 0.25, 0.5])
    out_x, out_y = A.mix(x, y, lam)
    for i, j in ((0, 2), (1, 0), (2, 1)):  # partner of i is i - 1
        assert torch.allclose(out_x[i], lam[i] * x[i] + (1 - lam[i]) * x[j])
        assert torch.allclose(out_y[i], lam[i] * y[i] + (1 - lam[i]) * y[j])


def test_paste_weights_targets_by_the_pasted_area():
    x = torch.stack([torch.full((1, 4, 4), float(i)) for i in range(3)])
    mask = A.box_mask(
        4, 4, torch.tensor([0, 0, 1]), torch.tensor([2, 0, 3]), torch.tensor([0, 0, 1]), torch.tensor([4, 0, 2])
    )
    out_x, out_y = A.paste(x, torch.eye(3), mask)
    assert out_x[0, 0, :2].eq(2).all() and out_x[0, 0, 2:].eq(0).all()  # half of sample 0 comes from sample 2
    assert torch.equal(out_x[1], x[1])  # empty box
    assert torch.allclose(out_y[0], torch.tensor([0.5, 0.0, 0.5]))
    assert torch.allclose(out_y[1], torch.tensor([0.0, 1.0, 0.0]))
    assert torch.allclose(out_y[2], torch.tensor([0.0, 0.125, 0.875]))  # 2 of 16 pixels pasted


# ---- the configured pipeline ------------------------------------------------------------------------------
def pipeline(ops: list, seed: int = 0, num_classes: int = 4) -> BatchAugment:
    cfg = AugmentConfig(ops=ops)
    return build_augment(cfg, normalize=None, num_classes=num_classes, seed=seed)


ALL_OPS = [
    {"random_crop": {"size": 6, "padding": 2}},
    "hflip",
    {"cutout": {"size": 2, "p": 0.5}},
    {"mixup": {"alpha": 0.4, "p": 0.5}},
    {"cutmix": {"p": 0.5}},
]


def test_same_seed_same_batches_other_seed_other_batches():
    x, y = torch.rand(16, 3, 6, 6), torch.randint(0, 4, (16,))
    augments = [pipeline(ALL_OPS, seed) for seed in (7, 7, 8)]
    runs = [[aug(x, y) for _ in range(3)] for aug in augments]
    for (xa, ya), (xb, yb) in zip(runs[0], runs[1]):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(runs[0][0][0], runs[2][0][0])
    assert not torch.equal(runs[0][0][0], runs[0][1][0])  # successive batches draw anew


def test_draws_are_per_sample():
    x = batch(64, 1, 4, 4)
    out, _ = pipeline(["hflip"])(x, torch.zeros(64, dtype=torch.long))
    flipped = torch.tensor([torch.equal(out[i], x[i].flip(-1)) for i in range(64)])
    assert 10 < int(flipped.sum()) < 54  # p = 0.5 per sample, not one coin for the batch


def test_soft_targets_are_distributions_that_cross_entropy_accepts():
    x, y = torch.rand(8, 3, 6, 6), torch.randint(0, 4, (8,))
    out_x, out_y = pipeline(ALL_OPS)(x, y)
    assert out_y.shape == (8, 4) and out_y.dtype == torch.float32
    assert torch.allclose(out_y.sum(1), torch.ones(8)) and out_y.min() >= 0
    assert torch.isfinite(nn.CrossEntropyLoss()(torch.randn(8, 4), out_y))
    _, unmixed = pipeline([{"mixup": {"p": 0.0}}])(x, y)
    assert torch.equal(unmixed, F.one_hot(y, 4).float())  # p = 0: one-hot, but still soft for a steady dtype


def test_normalises_first_then_augments():
    x = torch.full((2, 1, 4, 4), 255, dtype=torch.uint8)
    aug = build_augment(
        AugmentConfig(ops=[{"random_crop": {"size": 4, "padding": 0}}]), Normalize([0.5], [0.5]), num_classes=2, seed=0
    )
    out, _ = aug(x, torch.zeros(2, dtype=torch.long))
    assert out.dtype == torch.float32 and torch.allclose(out, torch.ones_like(out))


def test_state_round_trip_resumes_the_same_draws():
    x, y = torch.rand(8, 3, 6, 6), torch.randint(0, 4, (8,))
    full = pipeline(ALL_OPS, seed=3)
    full(x, y)
    state = AugmentState(full).state_dict()
    expected = full(x, y)
    resumed = pipeline(ALL_OPS, seed=99)
    AugmentState(resumed).load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(resumed(x, y), expected))
    other_rank = pipeline(ALL_OPS, seed=99)
    AugmentState(other_rank, rank=1).load_state_dict(state)  # rank 0's stream is not adopted by rank 1
    assert not torch.equal(other_rank(x, y)[0], expected[0])


def test_crop_that_does_not_fit_is_a_data_error():
    with pytest.raises(DataError, match="does not fit"):
        pipeline([{"random_crop": {"size": 9, "padding": 1}}])(torch.rand(2, 1, 6, 6), torch.zeros(2).long())


# ---- configs -----------------------------------------------------------------------------------------------
def test_config_forms_and_errors():
    cfg = AugmentConfig.model_validate(parse_value("{on: loader, ops: [hflip, {cutout: {size: 4}}]}"))
    assert cfg.on == "loader" and [type(e.op).__name__ for e in cfg.ops] == ["HFlip", "Cutout"]
    assert cfg.model_dump(mode="json")["ops"] == [{"hflip": {"p": 0.5}}, {"cutout": {"size": 4, "p": 1.0}}]
    assert AugmentConfig.model_validate(cfg.model_dump(mode="json")) == cfg
    for bad in (
        {"flip": {}},
        {"hflip": {"q": 1}},
        {"hflip": {}, "cutout": {"size": 2}},
        {"cutout": {"size": 0}},
        {"mixup": {"alpha": 0}},
        {},
    ):
        with pytest.raises(ValueError):
            AugmentOp.model_validate(bad)
    for model in (AugmentConfig, A.RandomCrop, A.HFlip, A.Cutout, A.Mixup, A.Cutmix, AugmentOp):
        assert all(info.description for info in model.model_fields.values()), model


def test_on_loader_augments_in_reseeded_workers_reproducibly():
    data = memory_dataset()  # 32 training samples of 1x4x4
    aug = build_augment(
        AugmentConfig(ops=[{"random_crop": {"size": 4, "padding": 2}}]), Normalize([0.0], [1.0]), num_classes=10, seed=0
    )
    cfg = LoaderConfig(num_workers=2, persistent_workers=False)

    def run(seed):
        loader = build_loader(
            data,
            cfg,
            batch_size=4,
            sampler=None,
            drop_last=False,
            seed=seed,
            device=CPU,
            collate_fn=CollateAugment(aug),
        )
        return torch.cat([inputs for inputs, _ in loader])

    first, again, other = run(0), run(0), run(1)
    assert first.dtype == torch.float32 and torch.equal(first, again) and not torch.equal(first, other)
    assert not torch.equal(first, data.images.float() / 255)  # cropped, not just normalised


@pytest.mark.slow
def test_resumed_training_draws_what_the_full_run_drew(tiny):
    """Through the trainer: the augmentation generator travels in the checkpoint (AugmentState)."""
    from accel.callbacks.base import Callback
    from accel.config.recipe import validate_recipe
    from accel.train.run import build_trainer

    class StopAt(Callback):
        def on_batch_end(self, trainer, info):
            if trainer.step == 4:
                trainer.stop_signal = 15

    tiny["data"]["augment"] = {"ops": [{"random_crop": {"size": 8, "padding": 1}}, "hflip", "mixup"]}
    recipe = validate_recipe(tiny)
    whole = build_trainer(recipe)
    whole.fit()
    first = build_trainer(recipe, extra_callbacks=[StopAt()])
    assert first.fit()["status"] == "interrupted"
    second = build_trainer(recipe)
    second.load_state_dict(first.state_dict())
    second.fit()
    for a, b in zip(whole.module.parameters(), second.module.parameters()):
        assert torch.equal(a, b)
