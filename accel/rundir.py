"""The run directory contract (README.md, "Run directories"): recipe.yaml, env.json, metrics.jsonl, tb/,
checkpoints/, summary.json."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .callbacks.base import Callback


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    @classmethod
    def default_for(cls, name: str) -> "RunDir":
        return cls(Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoints / "last.pt"

    def write_text(self, name: str, text: str) -> Path:
        """Atomic: a reader never sees half a file."""
        target = self.path / name
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, target)
        return target

    def write_json(self, name: str, data: Any) -> Path:
        return self.write_text(name, json.dumps(data, indent=2, default=str) + "\n")


class RunDirWriter(Callback):
    """Appends every logged record to metrics.jsonl and writes summary.json when the run ends, however it ends."""

    def __init__(self, run_dir: RunDir):
        self.run_dir = run_dir

    def on_log(self, trainer, record: dict[str, Any]) -> None:
        with (self.run_dir.path / "metrics.jsonl").open("a") as handle:
            handle.write(json.dumps(record) + "\n")

    def on_fit_end(self, trainer, summary: dict[str, Any]) -> None:
        summary["run_dir"] = str(self.run_dir.path)
        self.run_dir.write_json("summary.json", summary)
