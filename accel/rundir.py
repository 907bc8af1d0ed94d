"""The run directory contract (README.md, "Run directories"): recipe.yaml, env.json, metrics.jsonl, tb/,
checkpoints/, summary.json."""
from __future__ import annotations

import json
import math
import os
import shlex
import time
from pathlib import Path
from typing import Any

from .callbacks.base import Callback
from .errors import AccelError
from .runlock import RunDirLock

RUN_FILES = ("recipe.yaml", "summary.json", "metrics.jsonl", "checkpoints")  # any of them: the folder holds a run


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
        return cls(default_path(name))

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoints / "last.pt"

    def lock(self) -> RunDirLock:
        """Take the directory's lock for this process (refused, with the holder's PID, while another has it)."""
        return RunDirLock(self.path).acquire()

    def holds_run(self) -> bool:
        return any((self.path / name).exists() for name in RUN_FILES)

    def check_new(self) -> None:
        """Refuse to start a run where one already is: its results would be overwritten and mixed with ours."""
        if not self.holds_run():
            return
        status = self._status()
        resume = (f"Continue it with `{resume_command(self.path)}`, or start a new run in another folder"
                  if self.last_checkpoint.is_file() else "Start the new run in another folder")
        raise AccelError(f"{self.path} already holds a run{f' ({status})' if status else ''}; accel never "
                         f"overwrites one. {resume} (a different --out).")

    def check_resumable(self, epochs: int, max_steps: int | None) -> None:
        """Refuse a --resume that would rewrite a finished result: a completed run asked for no more training
        than it did, or a diverged one (it would continue from the same weights and optimizer state)."""
        summary = self._summary()
        status, done = summary.get("status"), summary.get("steps" if max_steps else "epochs")
        if status == "diverged":
            raise AccelError(f"{self.path} holds a run that diverged at step {summary.get('diverged_at_step')}: "
                             "resuming it would continue from the same weights and optimizer state (its learning "
                             "rate included), so nothing in it was changed. Start a new run in another folder (a "
                             "different --out) with a lower optim.lr or train.clip_grad_norm.")
        wanted = max_steps or epochs
        if status != "completed" or not isinstance(done, int) or wanted > done:
            return
        unit, key = ("steps", "train.max_steps") if max_steps else ("epochs", "train.epochs")
        raise AccelError(
            f"{self.path} holds a completed run ({done} {unit}), and this recipe asks for no more ({key} {wanted}): "
            "--resume would train nothing and rewrite its results, so nothing in it was changed. To train it longer, "
            f"resume with a larger budget (`{resume_command(self.path)} --set {key}={done * 2}`; a learning-rate "
            "schedule planned for the old length cannot be continued), or start a new run in another folder.")

    def _summary(self) -> dict[str, Any]:
        try:
            summary = json.loads((self.path / "summary.json").read_text())
        except (OSError, ValueError):
            return {}
        return summary if isinstance(summary, dict) else {}

    def _status(self) -> str | None:
        return self._summary().get("status")

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


def default_path(name: str) -> Path:
    """Where a run goes without --out."""
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def resume_command(path: Path) -> str:
    """The command that continues the run in `path` with its own resolved recipe, quoted for a shell."""
    return f"accel train {shlex.quote(str(Path(path) / 'recipe.yaml'))} --out {shlex.quote(str(path))} --resume"


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
