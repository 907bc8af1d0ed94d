"""Checkpoint files: written atomically (temp file, fsync, rename), read with weights_only=True."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError
from .fsdp import unsharded_class


def save_checkpoint(state: dict[str, Any], path: Path) -> None:
    """Write so that `path` is always either the old complete file or the new complete file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(f"No checkpoint at {path}. `--resume` continues a run that saved one; start it "
                              "without `--resume` first (checkpoints are written every `checkpoint.every_epochs`).")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated or foreign files, or objects weights_only refuses
        raise CheckpointError(f"Cannot read checkpoint {path}: {err}") from None


def model_signature(module: torch.nn.Module) -> dict[str, Any]:
    """Enough to tell that a checkpoint belongs to a different model before loading it."""
    return {"class": unsharded_class(module).__name__, "params": sum(p.numel() for p in module.parameters()),
            "keys": len(module.state_dict())}


def check_same_model(saved: dict[str, Any], module: torch.nn.Module, path: Path) -> None:
    current = model_signature(module)
    if saved != current:
        raise CheckpointError(
            f"Checkpoint {path} was written for a different model ({saved['class']}, {saved['params']:,} parameters) "
            f"than this recipe builds ({current['class']}, {current['params']:,} parameters). Resume with the "
            "recipe that wrote it, or start a new run directory (a different --out).")
