"""Batch augmentation with plain torch ops: random crop with padding, horizontal flip, cutout, mixup, cutmix.

Every op is a pure function of the batch and explicit random parameters (testable against its definition),
plus a config class that draws those parameters per sample. All draws come from one private CPU generator,
so the same seed gives the same augmentation on CPU and CUDA, and its state can be checkpointed. The draws
are a few numbers per sample; the pixel work runs wherever the batch is (the GPU when there is one).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_serializer, model_validator

from ..callbacks.base import Callback
from ..errors import DataError
from ..runs.rng import rank_seed
from ..schema import StrictModel
from .normalize import Normalize

Batch = tuple[torch.Tensor, torch.Tensor]


# ---- the ops as pure functions ----------------------------------------------------------------------------
def crop(x: torch.Tensor, size: int, padding: int, top: torch.Tensor, left: torch.Tensor) -> torch.Tensor:
    """Zero-pad each side by `padding`, then cut sample i's size x size window at (top[i], left[i])."""
    if padding:
        x = F.pad(x, (padding, padding, padding, padding))
    n, c, height, width = x.shape
    span = torch.arange(size, device=x.device)
    rows, cols = top[:, None] + span, left[:, None] + span  # (N, size) each
    # one gather over flattened pixels: 3-5x faster on CPU than x[n, :, rows, cols] advanced indexing
    flat = (rows[:, :, None] * width + cols[:, None, :]).view(n, 1, size * size).expand(n, c, size * size)
    return x.reshape(n, c, height * width).gather(2, flat).view(n, c, size, size)


def hflip(x: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Mirror left-right the samples where `flip` (bool, N) is set."""
    return torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)


def box_mask(
    height: int, width: int, y0: torch.Tensor, y1: torch.Tensor, x0: torch.Tensor, x1: torch.Tensor
) -> torch.Tensor:
    """(N, 1, H, W) bool mask, True inside sample i's box [y0, y1) x [x0, x1)."""
    ys = torch.arange(height, device=y0.device)
    xs = torch.arange(width, device=x0.device)
    inside_y = (ys >= y0[:, None]) & (ys < y1[:, None])
    inside_x = (xs >= x0[:, None]) & (xs < x1[:, None])
    return (inside_y[:, :, None] & inside_x[:, None, :])[:, None]


def cutout(x: torch.Tensor, size: int, cy: torch.Tensor, cx: torch.Tensor, apply: torch.Tensor) -> torch.Tensor:
    """Zero a size x size square centred at (cy[i], cx[i]), clipped at the border, where `apply` is set."""
    y0, x0 = cy - size // 2, cx - size // 2
    mask = box_mask(x.shape[-2], x.shape[-1], y0, y0 + size, x0, x0 + size) & apply.view(-1, 1, 1, 1)
    return x.masked_fill(mask, 0)


def mix(x: torch.Tensor, y: torch.Tensor, lam: torch.Tensor) -> Batch:
    """Mixup: sample i becomes lam_i * sample_i + (1 - lam_i) * sample_{i-1}, targets alike (soft targets)."""
    lam_x = lam.to(x.dtype).view(-1, 1, 1, 1)
    lam_y = lam.to(y.dtype).view(-1, 1)
    return lam_x * x + (1 - lam_x) * x.roll(1, 0), lam_y * y + (1 - lam_y) * y.roll(1, 0)


def paste(x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> Batch:
    """CutMix: inside mask (N,1,H,W) the pixels of sample i-1; targets weighted by the pasted area."""
    kept = 1 - mask.flatten(1).float().mean(1).to(y.dtype)
    return torch.where(mask, x.roll(1, 0), x), kept[:, None] * y + (1 - kept[:, None]) * y.roll(1, 0)


def soft_targets(y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Class indices -> one-hot float rows; probabilities pass through. nn.CrossEntropyLoss takes both."""
    return y if y.is_floating_point() else F.one_hot(y.long(), num_classes).float()


# ---- configs that draw the random parameters --------------------------------------------------------------
def _p(default: float) -> Any:
    return Field(default, ge=0.0, le=1.0, description="Probability that a sample gets this op (drawn per sample).")


def _chosen(p: float, n: int, g: torch.Generator) -> torch.Tensor:
    return torch.rand(n, generator=g) < p


def _beta(alpha: float, n: int, g: torch.Generator) -> torch.Tensor:
    # Beta(a, a) = X / (X + Y) with X, Y ~ Gamma(a); torch.distributions cannot take a private generator.
    gammas = torch._standard_gamma(torch.full((2, n), float(alpha)), generator=g)
    return gammas[0] / gammas.sum(0).clamp_min(1e-12)


class RandomCrop(StrictModel):
    """Pad with zeros (the mean colour once normalised), then crop a random window per sample."""

    size: int = Field(ge=1, description="Side of the square output crop, in pixels.")
    padding: int = Field(0, ge=0, description="Zero padding added on every side before cropping.")

    def apply(self, x: torch.Tensor, y: torch.Tensor, g: torch.Generator) -> Batch:
        n, _, h, w = x.shape
        room_h, room_w = h + 2 * self.padding - self.size, w + 2 * self.padding - self.size
        if min(room_h, room_w) < 0:
            raise DataError(
                f"augment random_crop: size {self.size} with padding {self.padding} does not fit "
                f"{h}x{w} images; lower `size` or raise `padding`."
            )
        top = torch.randint(0, room_h + 1, (n,), generator=g).to(x.device, non_blocking=True)
        left = torch.randint(0, room_w + 1, (n,), generator=g).to(x.device, non_blocking=True)
        return crop(x, self.size, self.padding, top, left), y


class HFlip(StrictModel):
    """Mirror images left-right."""

    p: float = _p(0.5)

    def apply(self, x: torch.Tensor, y: torch.Tensor, g: torch.Generator) -> Batch:
        return hflip(x, _chosen(self.p, len(x), g).to(x.device, non_blocking=True)), y


class Cutout(StrictModel):
    """Zero a square at a random centre (DeVries & Taylor 2017); the square is clipped at the border."""

    size: int = Field(ge=1, description="Side of the zeroed square, in pixels.")
    p: float = _p(1.0)

    def apply(self, x: torch.Tensor, y: torch.Tensor, g: torch.Generator) -> Batch:
        n, _, h, w = x.shape
        apply = _chosen(self.p, n, g)
        cy, cx = torch.randint(0, h, (n,), generator=g), torch.randint(0, w, (n,), generator=g)
        params = [t.to(x.device, non_blocking=True) for t in (cy, cx, apply)]
        return cutout(x, self.size, *params), y


class Mixup(StrictModel):
    """Blend each sample with its neighbour in the batch (Zhang et al. 2018), lam ~ Beta(alpha, alpha)."""

    alpha: float = Field(0.2, gt=0, description="Beta distribution parameter; small values keep lam near 0 or 1.")
    p: float = _p(1.0)
    mixes_labels: ClassVar[bool] = True

    def apply(self, x: torch.Tensor, y: torch.Tensor, g: torch.Generator) -> Batch:
        lam = torch.where(_chosen(self.p, len(x), g), _beta(self.alpha, len(x), g), torch.ones(len(x)))
        return mix(x, y, lam.to(x.device, non_blocking=True))


class Cutmix(StrictModel):
    """Paste a box from the neighbouring sample (Yun et al. 2019); box area (1 - lam), lam ~ Beta(alpha, alpha)."""

    alpha: float = Field(1.0, gt=0, description="Beta distribution parameter for the kept area.")
    p: float = _p(1.0)
    mixes_labels: ClassVar[bool] = True

    def apply(self, x: torch.Tensor, y: torch.Tensor, g: torch.Generator) -> Batch:
        n, _, h, w = x.shape
        cut = (1 - _beta(self.alpha, n, g)).sqrt() * _chosen(self.p, n, g)
        cy, cx = (torch.rand(n, generator=g) * h).long(), (torch.rand(n, generator=g) * w).long()
        half_h, half_w = (cut * h / 2).long(), (cut * w / 2).long()
        y0, y1 = (cy - half_h).clamp(0, h), (cy + half_h).clamp(0, h)
        x0, x1 = (cx - half_w).clamp(0, w), (cx + half_w).clamp(0, w)
        box = [t.to(x.device, non_blocking=True) for t in (y0, y1, x0, x1)]
        return paste(x, y, box_mask(h, w, *box))


OPS: dict[str, type[StrictModel]] = {
    "random_crop": RandomCrop,
    "hflip": HFlip,
    "cutout": Cutout,
    "mixup": Mixup,
    "cutmix": Cutmix,
}


class AugmentOp(StrictModel):
    """One op, written as `{op_name: {options}}` (or just `op_name` when the defaults suit)."""

    random_crop: RandomCrop | None = Field(None, description="Random crop with zero padding.")
    hflip: HFlip | None = Field(None, description="Random horizontal flip.")
    cutout: Cutout | None = Field(None, description="Zero a random square.")
    mixup: Mixup | None = Field(None, description="Blend pairs of samples and their labels (soft targets).")
    cutmix: Cutmix | None = Field(None, description="Paste a box between pairs of samples (soft targets).")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {value: {}} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _exactly_one(self) -> AugmentOp:
        if len(self.model_fields_set) != 1:
            raise ValueError(f"each augment op is one mapping key, one of: {', '.join(OPS)}")
        return self

    @model_serializer(mode="wrap")
    def _only_the_op(self, handler):
        return {k: v for k, v in handler(self).items() if v is not None}

    @property
    def op(self) -> StrictModel:
        return getattr(self, next(iter(self.model_fields_set)))


class AugmentConfig(StrictModel):
    """Batch augmentation of the training data; evaluation batches are only normalised."""

    on: Literal["device", "loader"] = Field(
        "device",
        description="`device`: on each batch where the model runs (the GPU when there is one), after "
        "the copy. `loader`: in the DataLoader worker processes, on the CPU, before the copy.",
    )
    ops: list[AugmentOp] = Field(
        default_factory=list,
        description="Ops applied in this order to every training "
        "batch, after uint8 -> float normalisation: random_crop, hflip, cutout, mixup, "
        "cutmix. mixup/cutmix turn targets into class probabilities.",
    )
    seed: int | None = Field(
        None,
        description="Seed of the augmentation's own generator; default: the recipe's "
        "seed (offset per distributed rank).",
    )


class BatchAugment:
    """Normalise (uint8 -> float), then the ops in order. A Trainer train_transform."""

    def __init__(self, ops: list[StrictModel], normalize: Normalize | None, num_classes: int, seed: int):
        self.ops, self.normalize, self.num_classes = ops, normalize, num_classes
        self.soft = any(getattr(op, "mixes_labels", False) for op in ops)
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, inputs: torch.Tensor, targets: torch.Tensor) -> Batch:
        if self.normalize is not None:
            inputs, targets = self.normalize(inputs, targets)
        if self.soft:  # soft on every batch, chosen or not: one target dtype keeps compiled graphs stable
            targets = soft_targets(targets, self.num_classes)
        for op in self.ops:
            inputs, targets = op.apply(inputs, targets, self.generator)
        return inputs, targets


def build_augment(
    cfg: AugmentConfig, normalize: Normalize | None, num_classes: int, seed: int, rank: int = 0
) -> BatchAugment:
    """The configured ops behind `normalize`; `seed` is used when the config sets none, offset per rank
    (identical draws on every rank would waste the data parallelism)."""
    base = cfg.seed if cfg.seed is not None else seed
    return BatchAugment([entry.op for entry in cfg.ops], normalize, num_classes, rank_seed(base, rank))


class CollateAugment:
    """A DataLoader collate_fn running the augmentation in each worker (`on: loader`).

    Each worker reseeds its copy once from the seed torch gave it (base seed from the loader's seeded
    generator + worker id), so workers draw different numbers and a rerun draws the same ones.
    """

    def __init__(self, augment: BatchAugment):
        self.augment, self._pid = augment, os.getpid()

    def __call__(self, samples: list) -> Batch:
        from torch.utils.data import get_worker_info

        from .loaders import collate

        info = get_worker_info()
        if info is not None and self._pid != os.getpid():
            self.augment.generator.manual_seed(info.seed % 2**63)
            self._pid = os.getpid()
        inputs, targets = collate(samples)
        return self.augment(inputs, targets)


class AugmentState(Callback):
    """Saves the augmentation generator in checkpoints, so a resumed run draws what the full run drew.

    Only rank 0 writes checkpoints, so other ranks keep their own (rank-offset) stream instead of adopting it.
    """

    state_name = "augment"

    def __init__(self, augment: BatchAugment, rank: int = 0):
        self.augment, self.rank = augment, rank

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.augment.generator.get_state(), "rank": self.rank}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "generator" in state and state.get("rank", 0) == self.rank:
            self.augment.generator.set_state(state["generator"])
