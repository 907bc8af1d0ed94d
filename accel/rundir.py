"""The run directory contract (README.md, "Run directories"): recipe.yaml, env.json, metrics.jsonl, tb/,
checkpoints/, summary.json."""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from .callbacks.base import Callback
from .errors import AccelError

RUN_FILES = ("recipe.yaml", "summary.json", "metrics.jsonl", "checkpoints")  # any of them: the folder holds a run
BENCH_FILES = ("report.json", "report.md", "trials", "recipes", "tune.json")  # any: a bench's or tune's results


class RunDir:
    """A run's folder. Creating one makes the folder (and nothing in it); what a run writes goes through here."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # a file in the way, no permission, read-only file system
            raise AccelError(f"cannot use {self.path} as a run directory: {err.strerror or err}. Choose another "
                             "--out.") from None
        if not os.access(self.path, os.W_OK | os.X_OK):
            raise AccelError(f"cannot write to run directory {self.path}: permission denied. Choose another --out.")

    @classmethod
    def default_for(cls, name: str) -> "RunDir":
        return cls(Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoints / "last.pt"

    def holds_run(self) -> bool:
        return any((self.path / name).exists() for name in RUN_FILES)

    def check_new(self) -> None:
        """Refuse to start a run where one already is: its results would be overwritten and mixed with ours."""
        if not self.holds_run():
            return
        status = self._status()
        resume = (f"Continue it with `accel train {self.path / 'recipe.yaml'} --out {self.path} --resume`, or start "
                  "a new run in another folder" if self.last_checkpoint.is_file() else "Start the new run in another "
                  "folder")
        raise AccelError(f"{self.path} already holds a run{f' ({status})' if status else ''}; accel never "
                         f"overwrites one. {resume} (a different --out).")

    def _status(self) -> str | None:
        try:
            return json.loads((self.path / "summary.json").read_text()).get("status")
        except (OSError, ValueError, AttributeError):
            return None

    def remove_stale_temp_files(self) -> list[Path]:
        """Delete the temporary files of checkpoint writes that a killed process left behind."""
        stale = sorted(self.checkpoints.glob(".*.tmp")) if self.checkpoints.is_dir() else []
        for path in stale:
            path.unlink(missing_ok=True)
        return stale

    def write_text(self, name: str, text: str) -> Path:
        return write_atomic(self.path / name, text)

    def write_json(self, name: str, data: Any) -> Path:
        return self.write_text(name, strict_json(data, indent=2) + "\n")


def check_results_out(path: str | Path, command: str) -> None:
    """Refuse an --out for `accel bench` or `accel tune` that holds a run's or a bench's results (or is a file):
    what the command writes would overwrite and mix with them, as `RunDir.check_new` refuses for `accel train`."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise AccelError(f"{path} is a file; `accel {command}` writes a folder there. Choose another --out.")
    held = [name for name in RUN_FILES + BENCH_FILES if (path / name).exists()]
    if held:
        what = "a run" if set(held) & set(RUN_FILES) else "a bench's results"
        raise AccelError(f"{path} already holds {what} ({', '.join(held)}); accel never overwrites one. Choose "
                         "another --out.")


def write_atomic(target: Path, text: str) -> Path:
    """Write `text` to `target` through a temporary file and a rename: a reader never sees half a file."""
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, target)
    return target


def strict_json(data: Any, **kwargs: Any) -> str:
    """JSON that every parser reads: NaN and infinities (a diverged loss) become null."""
    return json.dumps(_finite(data), default=str, allow_nan=False, **kwargs)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


class RunDirWriter(Callback):
    """Appends every logged record to metrics.jsonl and writes summary.json when the run ends, however it ends."""

    def __init__(self, run_dir: RunDir):
        self.run_dir = run_dir

    def on_log(self, trainer, record: dict[str, Any]) -> None:
        with (self.run_dir.path / "metrics.jsonl").open("a") as handle:
            handle.write(strict_json(record) + "\n")

    def on_fit_end(self, trainer, summary: dict[str, Any]) -> None:
        summary["run_dir"] = str(self.run_dir.path)
        self.run_dir.write_json("summary.json", summary)
