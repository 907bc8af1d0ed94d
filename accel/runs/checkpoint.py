"""Checkpoint files: written atomically (temp file, fsync, rename), read with weights_only=True."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, disk_full
from ..io import atomic_file
from ..strategy.sharding import unsharded_class
from .rundir import epoch_checkpoints

log = logging.getLogger("accel")

TRAINING_STATE = ("model", "model_signature", "optimizer", "scheduler", "epoch", "step")  # what every reader uses
# What a newer accel writes beside them, and what a resume from a checkpoint without it does instead: it
# continues, but not exactly as the run would have gone on
LATER_STATE = {
    "speedups": ({}, "the speed-ups' state starts afresh (fp16's loss scale, EMA weights)"),
    "callbacks": ({}, "the callbacks' state starts afresh (early stopping's best value and patience)"),
    "rng": (
        None,
        "the random streams are seeded afresh from the seed and step, so data order, augmentation and "
        "dropout differ from an uninterrupted run",
    ),
    "batch_in_epoch": (0, "the epoch starts again from its first batch"),
    "meter": ({}, "the epoch's running figures start afresh"),
}


def save_checkpoint(state: dict[str, Any], path: Path) -> None:
    """Write so that `path` is always either the old complete file or the new complete file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_file(path) as handle:
            torch.save(state, handle)
    except BaseException as err:
        if disk_full(err):
            raise CheckpointError(disk_full_message(state, path)) from None
        raise


def disk_full_message(state: Any, path: Path) -> str:
    needed = _tensor_bytes(state)
    try:
        free = f", {shutil.disk_usage(path.parent).free / 1e6:,.1f} MB free"
    except OSError:
        free = ""
    previous = (
        f"The previous checkpoint {path} is intact. Free space there (or lower checkpoint.keep), then "
        "continue with --resume."
        if path.is_file()
        else f"No earlier checkpoint was at {path}. Free space there (or lower checkpoint.keep) and run again."
    )
    return (
        f"Disk full: could not write checkpoint {path} (about {needed / 1e6:,.1f} MB needed{free} in "
        f"{path.parent}); the partial file was removed. {previous}"
    )


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(item) for item in value)
    return 0


def load_checkpoint(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(
            f"No checkpoint at {path}. `--resume` continues a run that saved one; start it "
            "without `--resume` first (checkpoints are written every `checkpoint.every_epochs`)."
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated or foreign files, or objects weights_only refuses
        raise CheckpointError(unreadable_message(path, err)) from None
    missing = [key for key in TRAINING_STATE if not isinstance(state, dict) or key not in state]
    if missing:
        intact = newest_intact(path)
        tip = f" The newest intact checkpoint beside it is {intact}: copy it over {path}." if intact else ""
        raise CheckpointError(
            f"{path} is not a checkpoint written by accel: it holds {_describe(state)}, without "
            f"{', '.join(missing)}. accel resumes and exports from its own checkpoints "
            f"(model, optimizer, schedule, RNG, epoch and step together).{tip}"
        )
    return state


def with_later_state(state: dict[str, Any], path: Path) -> dict[str, Any]:
    """`state` with what an older accel did not write (LATER_STATE) filled in, and a warning that names each
    missing key and what the resume does without it."""
    missing = [key for key in LATER_STATE if key not in state]
    if missing:
        log.warning(
            "%s lacks %s (written by an older accel); resuming without %s: %s.",
            path,
            ", ".join(missing),
            "it" if len(missing) == 1 else "them",
            "; ".join(LATER_STATE[key][1] for key in missing),
        )
    return {**{key: LATER_STATE[key][0] for key in missing}, **state}


def _describe(state: Any) -> str:
    if isinstance(state, dict) and state and all(isinstance(v, torch.Tensor) for v in state.values()):
        return f"{len(state)} tensors by name (a model's state_dict?)"
    if isinstance(state, dict):
        return (
            f"a dict of {', '.join(map(str, list(state)[:6]))}{', ...' if len(state) > 6 else ''}"
            if state
            else "an empty dict"
        )
    return f"a {type(state).__name__}"


def unreadable_message(path: Path, err: Exception) -> str:
    """Why `path` cannot be loaded, without torch's advice to load it unsafely, and the newest file that can."""
    text = str(err)
    # torch words a refused import two ways: "Unsupported global: GLOBAL x.Y was not an allowed global" and
    # (2.14, for a blocked module such as os) "Trying to load unsupported GLOBAL posix.system whose module ..."
    refused = re.search(r"unsupported global\W*(?:GLOBAL\s+)?([\w.]+)?", text, re.IGNORECASE)
    if refused:  # a pickle that would import and call something: refused, as it should be
        what = f" (`{refused.group(1)}`)" if refused.group(1) else ""
        why = (
            f"Refused to load {path}: it holds code that loading it would run{what}, not only tensors and plain "
            "data. accel loads checkpoints with weights_only=True and never runs code from a file; do not load "
            "this one elsewhere unless you trust where it came from."
        )
    else:
        why = f"Checkpoint {path} is damaged or not a checkpoint ({_reason(text) or type(err).__name__})."
    intact = newest_intact(path)
    if intact is None:
        return why + " No intact epoch-NNN.pt checkpoint is beside it."
    return why + f" The newest intact checkpoint beside it is {intact}: copy it over {path} to continue from there."


def _reason(text: str) -> str:
    """torch's reason a file did not load, less its advice: every line naming weights_only (which says to load
    the file unsafely) or torch.load's documentation."""
    text = text.split("WeightsUnpickler error:", 1)[-1]
    advice = ("weights_only", "weights only", "torch.load")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return next((ln for ln in lines if not any(word in ln.lower() for word in advice)), "")


def newest_intact(path: Path) -> Path | None:
    """The newest epoch-NNN.pt next to `path` (other than it) that loads."""
    for candidate in reversed(epoch_checkpoints(path.parent)):
        if candidate == path:
            continue
        try:
            torch.load(candidate, map_location="cpu", weights_only=True)
            return candidate
        except Exception:  # damaged too: try the one before
            continue
    return None


def model_signature(module: torch.nn.Module) -> dict[str, Any]:
    """Enough to tell that a checkpoint belongs to a different model before loading it: the class, and every
    state_dict entry's name and shape (two models of one class and size can still differ in both)."""
    state = module.state_dict()
    return {
        "class": unsharded_class(module).__name__,
        "params": sum(p.numel() for p in module.parameters()),
        "keys": len(state),
        "shapes": {name: list(value.shape) for name, value in state.items() if isinstance(value, torch.Tensor)},
    }


def check_same_model(saved: dict[str, Any], module: torch.nn.Module, path: Path) -> None:
    current = model_signature(module)
    # an older accel's checkpoint has no shapes: compare what it wrote
    if {key: current[key] for key in saved if key in current} == saved:
        return
    raise CheckpointError(
        f"Checkpoint {path} was written for a different model ({saved['class']}, {saved['params']:,} parameters"
        f"{_first_difference(saved.get('shapes'), current['shapes'])}) than this recipe builds "
        f"({current['class']}, {current['params']:,} parameters). Resume with the recipe that wrote it, or start "
        "a new run directory (a different --out)."
    )


def _first_difference(saved: dict[str, list[int]] | None, current: dict[str, list[int]]) -> str:
    if saved is None:
        return ""
    for name, shape in saved.items():
        if name not in current:
            return f"; its `{name}` is not in this model"
        if current[name] != shape:
            return f"; its `{name}` is {shape}, here {current[name]}"
    extra = next((name for name in current if name not in saved), None)
    return f"; this model's `{extra}` is not in it" if extra else ""


SCHEDULE_LENGTHS = ("total_steps", "T_max", "total_iters", "step_size")  # torch schedulers' length settings


def schedule_lengths(state: Any) -> list[tuple[str, Any]]:
    """The length settings found anywhere in a scheduler's state dict (SequentialLR nests its parts)."""
    if isinstance(state, dict):
        found = [(key, state[key]) for key in SCHEDULE_LENGTHS if key in state]
        return found + [
            item for key, value in state.items() if key not in SCHEDULE_LENGTHS for item in schedule_lengths(value)
        ]
    if isinstance(state, (list, tuple)):
        return [item for value in state for item in schedule_lengths(value)]
    return []


def check_same_schedule(saved: dict[str, Any], current: dict[str, Any], path: Any) -> None:
    """A checkpoint's learning-rate schedule was planned for a run of its length; another length cannot continue it."""
    before, now = schedule_lengths(saved), schedule_lengths(current)
    if before != now:
        lengths = lambda items: ", ".join(f"{k} {v}" for k, v in items) or "none"  # noqa: E731
        raise CheckpointError(
            f"Checkpoint {path} continues a learning-rate schedule planned as {lengths(before)}, but this recipe plans "
            f"{lengths(now)} (train.epochs, train.max_steps, data.batch_size or train.grad_accum differ). Resume with "
            "the run's own recipe, RUN_DIR/recipe.yaml, or start a new run directory."
        )


def finite_weights(module: torch.nn.Module) -> bool:
    """Whether this process's part of every floating-point tensor of the model is finite: buffers too (batch
    norm's running variance overflows first)."""
    return all(bool(torch.isfinite(_local(t)).all()) for t in module.state_dict().values() if t.is_floating_point())


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's part of a parameter (a sharded one is a DTensor)."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor.detach()
