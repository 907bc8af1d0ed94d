"""A trial's own folder, where its frameworks' outputs go (TensorBoard, W&B and MLflow runs, an HF Trainer's or
Lightning's output folders: accel/trial/instrument), made at first use and gone with the process. Keeping the
user's own files as they were is the trial's room's job, whatever writes them (accel/bench/isolation.py); this
folder keeps a trial's runs out of the user's tracking (W&B offline, a store of MLflow's own)."""

from __future__ import annotations

import os
import tempfile


class TrialFiles:
    def __init__(self) -> None:
        self._folder: tempfile.TemporaryDirectory | None = None  # made at first use, gone with the process

    def folder(self, name: str) -> str:
        """A folder of the trial's own, made on first use."""
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="accel-trial-files-")
        path = os.path.join(self._folder.name, name)
        os.makedirs(path, exist_ok=True)
        return path


FILES = TrialFiles()  # the process's: a process is one trial
