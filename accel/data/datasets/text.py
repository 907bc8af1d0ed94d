"""Token streams for language models: `text_files` (a folder of text files, read as bytes) and `token_file` (a
flat memory-mapped array of token ids, the layout nanoGPT's prepare scripts write). Both are served as fixed
windows without padding; the validation split is the stream's tail, so it never depends on a seed."""

from __future__ import annotations

import math
import sysconfig
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field
from torch.utils.data import Dataset

from ...errors import DataError
from ...registry import DATASETS
from ..splits import Splits
from .base import DatasetConfig
from .memory import GatheredBatch, GatheredDict

STDLIB = "stdlib"  # `root: stdlib`: the running Python's standard library, real text on every machine


class TokenChunks(Dataset):
    """Non-overlapping windows of a 1-D token array: sample i is `(tokens[i*c : i*c+c], tokens[i*c+1 : i*c+c+1])`
    as int64, c = context. The array may be a memory map; only the requested windows are read.

    `layout="hf"` serves `{"input_ids": w, "labels": w}` for w = tokens[i*c : i*c+c] instead, the Hugging Face
    convention: the model shifts the labels itself (so each window scores c-1 next tokens, not c).

    Every tensor of a batch is contiguous and has storage of its own, as `default_collate` would make it."""

    in_memory = True  # indexing is a cheap gather: no loader workers needed

    def __init__(self, tokens: np.ndarray, context: int, layout: str = "pairs", what: str = "the set"):
        if len(tokens) < context + 1:
            raise _too_short(what, len(tokens), context)
        self.tokens, self.context, self.layout = tokens, context, layout
        self._offsets = np.arange(context + 1)

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.context

    def __getitem__(self, index: int) -> Any:
        batch = self.__getitems__([index])
        return {k: v[0] for k, v in batch.items()} if self.layout == "hf" else (batch.inputs[0], batch.targets[0])

    def __getitems__(self, indices: list[int]) -> GatheredBatch | GatheredDict:
        starts = np.asarray(indices, dtype=np.int64)[:, None] * self.context
        if self.layout == "hf":
            ids = _int64(self.tokens[starts + self._offsets[:-1]])
            return GatheredDict(input_ids=ids, labels=ids.clone())  # two tensors, as default_collate makes them
        window = self.tokens[starts + self._offsets]  # one read of the stored ids (a memory map's pages)
        # Inputs and targets each get their own contiguous int64 copy, made by the dtype conversion that runs
        # anyway: as slices of one int64 window they were strided views, and model code that calls
        # `targets.view(-1)` (every minimal GPT trainer's loss) fails on those.
        return GatheredBatch(_int64(window[:, :-1]), _int64(window[:, 1:]))


def _too_short(what: str, tokens: int, context: int) -> DataError:
    return DataError(
        f"{what} holds {tokens} tokens, too few to fill one window of context {context} plus its target "
        f"({context + 1} tokens): give more tokens, or lower data.dataset.context."
    )


def _int64(ids: np.ndarray) -> torch.Tensor:
    """A C-contiguous int64 tensor of `ids` (any stored dtype, any strides)."""
    return torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64))


def split_tail(tokens: np.ndarray, cfg: TextConfig) -> tuple[TokenChunks, TokenChunks | None]:
    """The first (1 - val_fraction) of the stream trains, the rest validates. A split too short for one window
    is named with the share that made it: the whole stream may be long enough."""
    total, window = len(tokens), cfg.context + 1
    n_val = int(total * cfg.val_fraction)
    if total < window:
        raise _too_short("the set", total, cfg.context)
    if total - n_val < window:
        raise DataError(
            f"data.dataset.val_fraction {cfg.val_fraction:g} holds out {n_val} of {total} tokens "
            f"for validation and leaves {total - n_val}, too few for one training window of "
            f"context {cfg.context} plus its target: lower data.dataset.val_fraction (or "
            "data.dataset.context)."
        )
    if 0 < n_val < window:
        enough = math.ceil(window / total * 100) / 100  # a round share that holds out a window
        fits = total - int(total * enough) >= window  # and leaves one to train on
        fix = f"raise data.dataset.val_fraction to {enough:g} or more, " if fits else ""
        raise DataError(
            f"data.dataset.val_fraction {cfg.val_fraction:g} holds out the last {n_val} of {total} tokens for "
            f"validation, too few for one validation window of context {cfg.context} plus its target ({window} "
            f"tokens): {fix}lower data.dataset.context, or set data.dataset.val_fraction: 0 to train without "
            "validation."
        )
    train = TokenChunks(tokens[: total - n_val], cfg.context, cfg.layout)
    return train, TokenChunks(tokens[total - n_val :], cfg.context, cfg.layout) if n_val else None


def token_splits(train: TokenChunks, val: TokenChunks | None, vocab_size: int, context: int) -> Splits:
    return Splits(train, val, num_classes=vocab_size, sample_shape=(context,), vocab_size=vocab_size)


class TextConfig(DatasetConfig):
    context: int = Field(128, ge=1, description="tokens per training window (the model sees this many at once)")
    val_fraction: float = Field(
        0.1, ge=0.0, lt=1.0, description="share of the stream, taken from its end, held out for validation"
    )
    layout: Literal["pairs", "hf"] = Field(
        "pairs",
        description="`pairs`: (inputs, targets shifted by one) for task "
        "language_model; `hf`: dicts of input_ids and labels for models that "
        "compute their own loss (task model_loss, Hugging Face)",
    )


def find_text_files(root: str, pattern: str) -> list[Path]:
    folder = Path(sysconfig.get_paths()["stdlib"]) if root == STDLIB else Path(root).expanduser()
    if not folder.is_dir():
        raise DataError(
            f"text_files: no folder at {folder}. Point `root` at a folder of text files, or use "
            f"`root: {STDLIB}` for the Python standard library's own sources."
        )
    files = sorted(path for path in folder.glob(pattern) if path.is_file())
    if not files:
        raise DataError(f"text_files: no file in {folder} matches `{pattern}`; change `glob` or `root`.")
    return files


@DATASETS.register("text_files")
class TextFiles:
    """Every file under `root` matching `glob`, sorted by path and joined, as bytes (vocabulary 256)."""

    class Config(TextConfig):
        root: str = Field(STDLIB, description=f"a folder of text files; `{STDLIB}`: this Python's standard library")
        glob: str = Field("*.py", description="which files of the folder, e.g. `*.py`, `**/*.txt`")

    @staticmethod
    def build(cfg: TextFiles.Config, seed: int) -> Splits:
        data = b"".join(path.read_bytes() for path in find_text_files(cfg.root, cfg.glob))
        tokens = np.frombuffer(data, dtype=np.uint8)
        return token_splits(*split_tail(tokens, cfg), vocab_size=256, context=cfg.context)


@DATASETS.register("token_file")
class TokenFile:
    """A flat binary file of token ids (uint16 or uint32), memory-mapped: bring your own tokenizer's output."""

    class Config(TextConfig):
        path: str = Field(description="the training tokens, e.g. `data/train.bin`")
        val_path: str | None = Field(
            None,
            description="validation tokens in a file of their own (`val.bin`); "
            "default: the tail of `path`, by val_fraction",
        )
        dtype: Literal["uint16", "uint32"] = Field("uint16", description="how each token id is stored")
        vocab_size: int | None = Field(
            None,
            ge=1,
            description="the tokenizer's vocabulary; default: the largest id in the files plus one (a pass over them)",
        )

    @staticmethod
    def build(cfg: TokenFile.Config, seed: int) -> Splits:
        tokens = map_tokens(cfg.path, cfg.dtype)
        if cfg.val_path is None:
            train, val = split_tail(tokens, cfg)
        else:
            val_tokens = map_tokens(cfg.val_path, cfg.dtype)
            train = TokenChunks(tokens, cfg.context, cfg.layout, f"token_file: {cfg.path}")
            val = TokenChunks(val_tokens, cfg.context, cfg.layout, f"token_file: val_path {cfg.val_path}")
        largest = max(int(part.tokens.max()) for part in (train, val) if part is not None)
        vocab = cfg.vocab_size or largest + 1
        if largest >= vocab:
            raise DataError(f"token_file: token id {largest} is outside vocab_size {vocab}")
        return token_splits(train, val, vocab_size=vocab, context=cfg.context)


def map_tokens(path: str, dtype: str) -> np.ndarray:
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataError(
            f"token_file: no file at {file}. Write your tokenizer's ids as a flat {dtype} array "
            f"(e.g. `np.array(ids, dtype=np.{dtype}).tofile(path)`)."
        )
    itemsize = np.dtype(dtype).itemsize
    if file.stat().st_size == 0:
        raise DataError(
            f"token_file: {file} is empty (0 bytes): it should hold your tokenizer's ids as a flat "
            f"{dtype} array; was it written completely?"
        )
    if file.stat().st_size % itemsize:
        raise DataError(
            f"token_file: {file} is {file.stat().st_size} bytes, not a whole number of {dtype} ids: is `dtype` right?"
        )
    return np.memmap(file, dtype=dtype, mode="r")
