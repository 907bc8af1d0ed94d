"""Per-sample CPU transforms declared in YAML: torchvision.transforms.v2 and albumentations pipelines.

An entry is `Name` or `{Name: {argument: value, ...}}`; an argument called `transforms` holds a nested list
(RandomApply, RandomChoice, OneOf, ...). Names and arguments are checked when the recipe is validated, so a
typo fails before any data is read. They run on the training split, in the loader workers, on uint8 CHW
images, and must return uint8 images of the same shape: normalisation happens later, on the device.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Annotated, Any

import numpy as np
import torch
from pydantic import AfterValidator, Field
from torch.utils.data import Dataset

from ..errors import DataError, did_you_mean
from ..extras import missing_message
from ..schema import StrictModel

Spec = str | dict[str, dict[str, Any] | None]
ImageFn = Callable[[torch.Tensor], torch.Tensor]


def _library(kind: str) -> tuple[Any, tuple[type, ...]]:
    """(module, base classes) for `torchvision` or `albumentations`; imported only when a recipe uses it."""
    if kind == "torchvision":
        from torchvision.transforms import v2

        return v2, (v2.Transform,)
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # its import would otherwise ask PyPI for a newer version
    try:
        import albumentations as A
    except ModuleNotFoundError as err:  # a ValueError: pydantic reports it at the recipe's line
        raise ValueError(missing_message("albumentations transforms", "albumentations")) from err
    return A, (A.BasicTransform, A.BaseCompose)


def transform_names(kind: str) -> list[str]:
    """Every transform class the library exports."""
    module, bases = _library(kind)
    classes = {name: getattr(module, name) for name in dir(module)}
    return sorted(name for name, obj in classes.items() if inspect.isclass(obj) and issubclass(obj, bases))


def parse_spec(entry: Spec) -> tuple[str, dict[str, Any]]:
    """`Name` or `{Name: {args}}` -> (Name, args)."""
    if isinstance(entry, str):
        return entry, {}
    if len(entry) != 1:
        raise ValueError(f"a transform is one `Name: {{arguments}}` mapping, got keys {sorted(entry)}")
    ((name, args),) = entry.items()
    return name, dict(args or {})


def build_transform(kind: str, entry: Spec) -> Any:
    """One transform object; an unknown name or argument is a ValueError that suggests the nearest one."""
    module, _ = _library(kind)
    name, args = parse_spec(entry)
    names = transform_names(kind)
    if name not in names:
        raise ValueError(f"unknown {kind} transform `{name}`{did_you_mean(name, names)}")
    cls = getattr(module, name)
    # albumentations only warns about unknown arguments; check them here so a typo is an error in both
    params = {p.name for p in inspect.signature(cls).parameters.values() if p.kind is not p.VAR_KEYWORD}
    for arg in args:
        if arg not in params:
            raise ValueError(
                f"{kind} `{name}` has no argument `{arg}`{did_you_mean(arg, params)}; "
                f"it takes: {', '.join(sorted(params - {'self'}))}"
            )
    if isinstance(args.get("transforms"), list):
        args["transforms"] = [build_transform(kind, item) for item in args["transforms"]]
    try:
        return cls(**args)
    except Exception as err:  # the libraries raise TypeError, ValueError or pydantic errors for bad values
        raise ValueError(f"{kind} `{name}`: {err}") from None


def _checked(kind: str) -> AfterValidator:
    def check(entry: Spec) -> Spec:
        build_transform(kind, entry)  # cheap: constructing a transform reads no data
        return entry

    return AfterValidator(check)


TorchvisionSpec = Annotated[Spec, _checked("torchvision")]
AlbumentationsSpec = Annotated[Spec, _checked("albumentations")]


class CpuTransformsConfig(StrictModel):
    """Per-sample transforms run in the loader workers on the training split (torchvision first)."""

    torchvision: list[TorchvisionSpec] = Field(
        default_factory=list,
        description="torchvision.transforms.v2 transforms, e.g. "
        "`[{RandomResizedCrop: {size: 64, scale: [0.5, 1.0]}}, RandomHorizontalFlip]`.",
    )
    albumentations: list[AlbumentationsSpec] = Field(
        default_factory=list,
        description="albumentations transforms, e.g. "
        "`[{HorizontalFlip: {p: 0.5}}, {RandomBrightnessContrast: {p: 0.2}}]`.",
    )

    @property
    def empty(self) -> bool:
        return not (self.torchvision or self.albumentations)


class _Albumentations:
    """An albumentations Compose on CHW tensors, reseeded once per process (each loader worker differs)."""

    def __init__(self, compose: Any):
        self.compose, self._pid = compose, None

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        if self._pid != os.getpid():  # albumentations keeps its own RNG; derive it from torch's per-worker seed
            self.compose.set_random_seed(torch.initial_seed() % 2**32)
            self._pid = os.getpid()
        out = self.compose(image=np.ascontiguousarray(image.permute(1, 2, 0).numpy()))["image"]
        out = out[:, :, None] if out.ndim == 2 else out
        return torch.from_numpy(np.ascontiguousarray(out)).permute(2, 0, 1)


def build_cpu_pipeline(cfg: CpuTransformsConfig) -> ImageFn | None:
    """One callable on a uint8 CHW image running both lists, or None when both are empty."""
    steps: list[ImageFn] = []
    if cfg.torchvision:
        from torchvision.transforms import v2

        steps.append(v2.Compose([build_transform("torchvision", e) for e in cfg.torchvision]))
    if cfg.albumentations:
        A, _ = _library("albumentations")
        steps.append(_Albumentations(A.Compose([build_transform("albumentations", e) for e in cfg.albumentations])))
    if not steps:
        return None

    def run(image: torch.Tensor) -> torch.Tensor:
        for step in steps:
            image = step(image)
        return image

    return run


class TransformedDataset(Dataset):
    """`dataset` with `fn` applied to each image; a failing or shape-changing transform names the sample."""

    def __init__(self, dataset: Dataset, fn: ImageFn):
        self.dataset, self.fn = dataset, fn

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, Any]:
        image, label = self.dataset[index]
        try:
            out = self.fn(image)
        except Exception as err:
            raise DataError(f"data.transforms failed on {self._name(index)} ({type(err).__name__}: {err}).") from err
        if not isinstance(out, torch.Tensor) or out.dtype != torch.uint8 or out.shape != image.shape:
            got = f"{out.dtype} {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            raise DataError(
                f"data.transforms turned {self._name(index)} from uint8 {tuple(image.shape)} into {got}. "
                "CPU transforms must keep uint8 images of the same shape (evaluation sees untransformed "
                "images, and normalisation happens on the device): drop ToDtype/Normalize/Resize there."
            )
        return out, label

    def _name(self, index: int) -> str:
        samples = getattr(self.dataset, "samples", None)
        return samples[index][0] if samples is not None else f"sample {index}"


def apply_cpu_transforms(dataset: Dataset, cfg: CpuTransformsConfig) -> Dataset:
    """`dataset` wrapped with the configured transforms, or unchanged when there are none."""
    fn = build_cpu_pipeline(cfg)
    return dataset if fn is None else TransformedDataset(dataset, fn)
