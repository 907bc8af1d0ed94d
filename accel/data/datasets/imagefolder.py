"""`imagefolder`: ROOT/<class>/<image> files decoded lazily per sample, the case DataLoader workers exist for."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, field_validator
from torch.utils.data import Dataset

from ...errors import DataError
from ...registry import DATASETS
from ..splits import Splits
from .base import DatasetConfig, split_indices

log = logging.getLogger(__name__)
LAYOUT = (
    "Expected the layout ROOT/<class_name>/<image files>, or ROOT/train/<class_name>/... plus "
    "ROOT/val/<class_name>/... for a fixed split."
)
# ImageNet statistics: measuring the folder's own would mean decoding every image before training starts.
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TORCHVISION_DECODERS_DEPRECATED = "The image decoding and encoding capabilities of TorchVision are deprecated"
MAX_SKIPS = 32  # consecutive unreadable files before giving up: beyond this the folder is broken, not noisy


class ImageFileDataset(Dataset):
    """(path, label) pairs decoded on access to uint8 (3, size, size): short side resized, then center-cropped."""

    decodes_without_gil = True  # torchvision's decoders and resize release it: loader threads decode in parallel

    def __init__(self, samples: list[tuple[str, int]], classes: list[str], image_size: int, on_corrupt: str = "fail"):
        self.samples, self.classes = samples, classes
        self.image_size, self.on_corrupt = image_size, on_corrupt
        self.skipped = 0  # per process: each DataLoader worker counts its own

    def __len__(self) -> int:
        return len(self.samples)

    def cache_key(self) -> dict:
        """What, besides the files themselves, decides the decoded pixels: the decoded cache's key."""
        return {
            "dataset": "imagefolder",
            "image_size": self.image_size,
            "on_corrupt": self.on_corrupt,
            # the 16-bit scaling is named so that entries built before it (wrapped values) stop matching
            "decode": "torchvision.io RGB, 16-bit scaled to 8; resize short side, antialias; center crop",
        }

    def load(self, path: str) -> torch.Tensor:
        """Decode one file to a uint8 RGB tensor of shape (3, image_size, image_size)."""
        # Imported here: torchvision costs ~1 s to import, which runs that only use in-memory data should not pay.
        from torchvision.io import ImageReadMode, decode_image, read_file
        from torchvision.transforms.v2 import functional as TF

        # torchvision 0.29 deprecates its decoders in favour of torchcodec, which accel does not depend on; the
        # warning would repeat for every image and tells an accel user nothing they can act on. A filter for that
        # one message, not catch_warnings: its save and restore of the process's filters races in loader threads.
        warnings.filterwarnings("ignore", TORCHVISION_DECODERS_DEPRECATED, DeprecationWarning)
        image = to_uint8(decode_image(read_file(path), mode=ImageReadMode.RGB))
        image = TF.resize(image, [self.image_size], antialias=True)
        return TF.center_crop(image, [self.image_size, self.image_size])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        tries = min(len(self), MAX_SKIPS)
        for attempt in range(tries):
            path, label = self.samples[(index + attempt) % len(self)]
            try:
                return self.load(path), label
            except (RuntimeError, OSError) as e:  # torchvision reports bad or truncated data as RuntimeError
                if self.on_corrupt == "fail":
                    raise DataError(
                        f"imagefolder: cannot decode {path} ({e}). Remove or replace the file, or set "
                        "`on_corrupt: skip` to substitute the next image."
                    ) from e
                self.skipped += 1
                log.warning("imagefolder: skipping unreadable image %s (%s)", path, e)
        raise DataError(
            f"imagefolder: {tries} consecutive images from {self.samples[index][0]} on could not be "
            "decoded; the folder looks broken, not merely noisy."
        )


def to_uint8(image: torch.Tensor) -> torch.Tensor:
    """A decoded image at any bit depth as the 8-bit one the model gets: a 16-bit PNG (torchvision decodes it to
    uint16) scaled from 0..65535 to 0..255, rounded (x / 257), not truncated to its low byte or left uint16 to
    fail later in a batch with the folder's 8-bit images."""
    if image.dtype == torch.uint8:
        return image
    if image.dtype.is_floating_point or image.dtype.is_signed:
        raise RuntimeError(f"decoded to {image.dtype} pixels, not unsigned integers")  # a DataError naming the file
    scale = torch.iinfo(image.dtype).max // 255  # 257 for 16 bits: 2**(8k) - 1 is a multiple of 255
    return ((image.to(torch.int64) + scale // 2) // scale).to(torch.uint8)


def _class_dirs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def scan(folder: Path, classes: list[str], extensions: list[str]) -> list[tuple[str, int]]:
    """(path, label) for every image under folder/<class>/, recursively, in sorted order."""
    index = {name: i for i, name in enumerate(classes)}
    found: dict[Path, list[Path]] = {}
    for class_dir in _class_dirs(folder):
        if class_dir.name not in index:
            raise DataError(
                f"imagefolder: {class_dir} is a class the training folder does not have "
                f"(classes: {', '.join(classes)}). {LAYOUT}"
            )
        found[class_dir] = sorted(p for p in class_dir.rglob("*") if p.suffix.lower()[1:] in extensions and p.is_file())
    exts = ", ".join(extensions)
    if not any(found.values()):
        raise DataError(f"imagefolder: found no images (extensions: {exts}) under {folder}. {LAYOUT}")
    empty = [d for d, files in found.items() if not files]
    if empty:
        raise DataError(
            f"imagefolder: class folder {empty[0]} holds no images (extensions: {exts}). Add images to it or remove it."
        )
    return [(str(p), index[d.name]) for d, files in found.items() for p in files]


def _is_split_without_val(root: Path) -> bool:
    """ROOT/train holding class folders, with no ROOT/val: a fixed split whose validation half is missing, not a
    class called `train`."""
    return (root / "train").is_dir() and not (root / "val").exists() and bool(_class_dirs(root / "train"))


def find_classes(root: Path) -> list[str]:
    """Sorted class folder names under root; a missing root or one without class folders is a DataError."""
    if not root.is_dir():
        raise DataError(f"imagefolder: root {root} does not exist or is not a folder. {LAYOUT}")
    classes = [d.name for d in _class_dirs(root)]
    if not classes:
        raise DataError(f"imagefolder: {root} has no class folders. {LAYOUT}")
    return classes


@DATASETS.register("imagefolder")
class ImageFolder:
    """Images in class folders, decoded lazily per sample (resize short side, center crop, RGB)."""

    class Config(DatasetConfig):
        root: str = Field(
            description="Folder holding <class_name>/<image files>, or train/ and val/ folders "
            "that each hold class folders."
        )
        image_size: int = Field(
            64,
            ge=1,
            description="Side of the square output: the short side is resized "
            "to this, then the image is center-cropped to image_size x image_size.",
        )
        extensions: list[str] = Field(
            ["jpg", "jpeg", "png"],
            min_length=1,
            description="File extensions treated as images (case-insensitive); other files are ignored.",
        )
        on_corrupt: Literal["fail", "skip"] = Field(
            "fail",
            description="An image that cannot be decoded: "
            "`fail` raises an error naming the file; `skip` logs a "
            "warning and substitutes the next image.",
        )

        @field_validator("extensions")
        @classmethod
        def _normalise(cls, value: list[str]) -> list[str]:
            return [ext.lower().lstrip(".") for ext in value]

    @staticmethod
    def build(cfg: ImageFolder.Config, seed: int) -> Splits:
        """Use ROOT/train and ROOT/val when both exist (val_fraction unused), else split ROOT (or ROOT/train, when
        it holds class folders but ROOT/val is missing) by val_fraction."""
        root = Path(cfg.root).expanduser()
        if (root / "train").is_dir() and (root / "val").is_dir():
            classes = find_classes(root / "train")
            train = scan(root / "train", classes, cfg.extensions)
            val: list[tuple[str, int]] | None = scan(root / "val", classes, cfg.extensions)
        else:
            if _is_split_without_val(root):
                log.warning(
                    "imagefolder: %s has train/ but no val/: splitting train/ by val_fraction (%g) for "
                    "validation. Add %s with the same class folders for a fixed split.",
                    root,
                    cfg.val_fraction,
                    root / "val",
                )
                root = root / "train"
            classes = find_classes(root)
            samples = scan(root, classes, cfg.extensions)
            train_idx, val_idx = split_indices(len(samples), cfg.val_fraction, seed)
            train = [samples[i] for i in train_idx.tolist()]
            val = [samples[i] for i in val_idx.tolist()] or None
        if len(classes) == 1:
            log.warning(
                "imagefolder: %s holds one class folder (`%s`): every label is 0, so a classification "
                "accuracy is 100%% whatever the model learns. %s",
                root,
                classes[0],
                LAYOUT,
            )

        def make(samples: list[tuple[str, int]]) -> ImageFileDataset:
            return ImageFileDataset(samples, classes, cfg.image_size, cfg.on_corrupt)

        return Splits(
            make(train),
            make(val) if val else None,
            num_classes=len(classes),
            sample_shape=(3, cfg.image_size, cfg.image_size),
            mean=IMAGENET_MEAN,
            std=IMAGENET_STD,
        )
