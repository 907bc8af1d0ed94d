"""NVIDIA DALI loader for image folders (`data.loader.backend: dali`).

File reader -> image decoding (`mixed`: nvJPEG on the GPU; `cpu` otherwise) -> resize of the short side ->
crop-mirror-normalise to a centre crop, CHW float. Batches are `(images, labels)` like the torch loader's,
already normalised (the trainer's uint8 normalisation passes float batches through). Each distributed rank
reads its own shard; the reader reshuffles the whole dataset every epoch from the pipeline seed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import torch

from ..errors import DataError
from ..extras import installed, missing_message

log = logging.getLogger("accel")
SCAN_LIMIT = 50_000  # files checked with PIL to name the one DALI failed on; beyond this it would take too long


def dali_available() -> bool:
    """nvidia.dali is importable (checked without importing it: the import takes seconds)."""
    return installed("nvidia.dali")


def require_dali() -> None:
    """A DataError saying how to install DALI when it is missing."""
    if not dali_available():
        raise DataError(
            f"{missing_message('data.loader.backend `dali`', 'nvidia.dali')} (the nvidia-dali-cuda130 wheel, which "
            "also runs CPU pipelines), or use `data.loader.backend: torch`."
        )


def _pipeline(
    files: list[str],
    labels: list[int],
    *,
    image_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    shuffle: bool,
    shard: tuple[int, int],
    decoder: str,
    **pipeline_kwargs,
):
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(**pipeline_kwargs)
    def images_and_labels():
        # pad_last_batch keeps every epoch a full permutation: without it the reader runs into the next
        # epoch to fill the last batch and the following epochs are shifted
        encoded, label = fn.readers.file(
            files=files,
            labels=labels,
            shard_id=shard[0],
            num_shards=shard[1],
            shuffle_after_epoch=shuffle,
            pad_last_batch=True,
            name="Reader",
        )
        images = fn.decoders.image(encoded, device=decoder, output_type=types.RGB)
        images = fn.resize(images, resize_shorter=image_size, antialias=True)
        images = fn.crop_mirror_normalize(
            images,
            crop=(image_size, image_size),
            dtype=types.FLOAT,
            mean=[255 * m for m in mean],
            std=[255 * s for s in std],
            output_layout="CHW",
        )
        return images, label

    return images_and_labels()


class DaliLoader:
    """Iterates `(float CHW images, int64 labels)` batches of `samples` ([(path, label)]) through DALI."""

    sampler = None  # the reader shuffles and shards; there is no torch sampler to set an epoch on

    def __init__(
        self,
        samples: list[tuple[str, int]],
        *,
        image_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        batch_size: int,
        train: bool,
        drop_last: bool,
        seed: int,
        device: torch.device,
        rank: int = 0,
        world_size: int = 1,
        num_threads: int = 2,
    ):
        require_dali()
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        gpu = device.type == "cuda"
        self.files = [path for path, _ in samples]
        self.batch_size = batch_size
        pipe = _pipeline(
            self.files,
            [label for _, label in samples],
            image_size=image_size,
            mean=mean,
            std=std,
            shuffle=train,
            shard=(rank, world_size),
            decoder="mixed" if gpu else "cpu",
            batch_size=batch_size,
            num_threads=num_threads,
            seed=seed % 2**31,
            device_id=(device.index or 0) if gpu else None,
        )  # None: a CPU-only pipeline
        pipe.build()
        policy = LastBatchPolicy.DROP if drop_last else LastBatchPolicy.PARTIAL
        try:  # the iterator runs the pipeline ahead as soon as it exists: decoding can fail right here
            self._batches = DALIGenericIterator(
                pipe, ["images", "labels"], reader_name="Reader", last_batch_policy=policy, auto_reset=True
            )
        except RuntimeError as err:
            raise self._decode_error(err) from err
        self._mid_epoch = False

    def __len__(self) -> int:
        return len(self._batches)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._mid_epoch:  # a pass that stopped early: finish that epoch so this one starts at its beginning
            for _ in self._batches:
                pass
        self._mid_epoch = True
        try:
            for out in self._batches:
                yield out[0]["images"], out[0]["labels"].view(-1).long()
        except RuntimeError as err:
            raise self._decode_error(err) from err
        self._mid_epoch = False

    def _decode_error(self, err: RuntimeError) -> DataError:
        """DALI does not say which file failed; find it so the error can name it."""
        from PIL import Image

        if len(self.files) > SCAN_LIMIT:
            return DataError(
                f"the DALI pipeline failed ({_first_line(err)}). DALI does not name the file; with "
                f"{len(self.files)} files accel does not scan them all: run with `data.loader.backend: "
                "torch`, which names an unreadable file (or skips it with `on_corrupt: skip`)."
            )
        for path in self.files:
            try:
                with Image.open(path) as image:
                    image.load()
            except Exception as bad:  # PIL raises many types for unreadable data
                return DataError(
                    f"DALI could not decode {path} ({type(bad).__name__}: {bad}). Remove or replace "
                    "the file (DALI cannot skip unreadable images; the torch backend can, with "
                    "`on_corrupt: skip`)."
                )
        return DataError(
            f"the DALI pipeline failed ({_first_line(err)}); every file decodes with PIL, so the cause is "
            "not an unreadable image."
        )


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def dali_loader(
    dataset,
    *,
    batch_size: int,
    train: bool,
    drop_last: bool,
    seed: int,
    device: torch.device,
    mean: Sequence[float],
    std: Sequence[float],
    rank: int = 0,
    world_size: int = 1,
    num_threads: int = 2,
) -> DaliLoader:
    """A DaliLoader for a file dataset (imagefolder): its samples, image size and normalisation statistics."""
    require_dali()
    if not hasattr(dataset, "samples") or not hasattr(dataset, "image_size"):
        raise DataError(
            f"data.loader.backend `dali` reads image files, but the dataset ({type(dataset).__name__}) "
            "is not a folder of image files. Use `backend: torch` for it."
        )
    if train and getattr(dataset, "on_corrupt", "fail") == "skip":  # once per run, not again for val
        log.warning(
            "DALI cannot skip unreadable images: one will stop the run with its file name "
            "(on_corrupt: skip applies to the torch backend only)"
        )
    return DaliLoader(
        dataset.samples,
        image_size=dataset.image_size,
        mean=mean,
        std=std,
        batch_size=batch_size,
        train=train,
        drop_last=drop_last,
        seed=seed,
        device=device,
        rank=rank,
        world_size=world_size,
        num_threads=num_threads,
    )
