"""A trial's checkpoints never land where the script's real run keeps its own. Under `accel bench` or `accel
profile`, a checkpoint written to a path (`eng.save`, or an unchanged script's `torch.save`) goes to a folder of the
trial's own instead (the same bytes, so its cost is measured), and the script's reads of that path (`eng.load`,
`torch.load`) and moves of it (`os.replace`, `os.rename`: an atomic save) follow it there: nanoGPT's
`out_dir/ckpt.pt` from a real run stays as it was. Files the script opens itself are its own business."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from . import trial_variables


class TrialFiles:
    """The script's paths, each mapped to the trial's copy once the trial wrote one."""

    def __init__(self) -> None:
        self._folder: tempfile.TemporaryDirectory | None = None  # made at the first save, gone with the process
        self._moved: dict[str, str] = {}

    def save_to(self, where: Any) -> Any:
        """Where a save to `where` writes: `where` itself when it is a file object."""
        path = _path(where)
        if path is None:
            return where
        if path not in self._moved:
            self._moved[path] = os.path.join(self._root(), f"{len(self._moved)}-{os.path.basename(path)}")
        return self._moved[path]

    def folder(self, name: str) -> str:
        """A folder of the trial's own, made on first use (where its TensorBoard, W&B and MLflow runs go)."""
        path = os.path.join(self._root(), name)
        os.makedirs(path, exist_ok=True)
        return path

    def _root(self) -> str:
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="accel-trial-files-")
        return self._folder.name

    def read_from(self, where: Any) -> Any:
        """Where a read of `where` finds it: the trial's copy, where the trial wrote one."""
        path = _path(where)
        return self._moved.get(path, where) if path is not None else where

    def move(self, original, src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
        """`os.replace(src, dst)` (`original`) of a file the trial wrote stays among the trial's files."""
        path = _path(src)
        if path is None or path not in self._moved:
            return original(src, dst, *args, **kwargs)
        return original(self._moved.pop(path), self.save_to(dst), *args, **kwargs)


FILES = TrialFiles()  # the process's: a process is one trial


def in_trial() -> bool:
    return trial_variables.asked()


def save_to(where: Any) -> Any:
    return FILES.save_to(where) if in_trial() else where


def read_from(where: Any) -> Any:
    return FILES.read_from(where) if in_trial() else where


def _path(where: Any) -> str | None:
    return os.path.abspath(os.fspath(where)) if isinstance(where, (str, os.PathLike)) else None
