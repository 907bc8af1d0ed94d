"""The run directory contract (README.md, "Run directories"): recipe.yaml, env.json, metrics.jsonl, tb/,
checkpoints/, summary.json."""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

from ..errors import AccelError
from ..io import check_creatable, check_not_dangling, default_out, strict_json, write_atomic
from .records import FitSummary, read_summary
from .runlock import RunDirLock, check_free

log = logging.getLogger("accel")
# the layout (README.md, "Run directories"): only RunDir joins these names; everything else asks it for paths
RECIPE, ENV, METRICS, SUMMARY, TENSORBOARD, CHECKPOINTS = (
    "recipe.yaml",
    "env.json",
    "metrics.jsonl",
    "summary.json",
    "tb",
    "checkpoints",
)
LAST_CHECKPOINT, EPOCH_CHECKPOINT = "last.pt", "epoch-{epoch:03d}.pt"  # in checkpoints/
SHARDED_LAST = "last"  # in checkpoints/: a link to the folder of the newest sharded checkpoint (strategy fsdp)
PROFILE, OOM_SNAPSHOT = "profile", "memory-oom.pickle"  # `accel train --profile`'s report; CUDA out of memory
RUN_FILES = (RECIPE, SUMMARY, METRICS, CHECKPOINTS)  # any of them: the folder holds a run
# any of them: the results of a bench, tune, bench-data or profile
BENCH_FILES = ("report.json", "report.md", "trials", "recipes", "tune.json", "bench-data.json", "profile.json")


class RunDir:
    """A run's folder. Creating one makes the folder (and nothing in it); what a run writes goes through here.
    `create=False` only names the paths of a run that is read (export, a message about an existing run)."""

    def __init__(self, path: str | Path, create: bool = True):
        self.path = Path(path)
        if create:
            self._make()

    def _make(self) -> None:
        check_not_dangling(self.path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # a file in the way, no permission, read-only file system
            raise AccelError(
                f"cannot use {self.path} as a run directory: {err.strerror or err}. Choose another --out."
            ) from None
        if not os.access(self.path, os.W_OK | os.X_OK):
            raise AccelError(f"cannot write to run directory {self.path}: permission denied. Choose another --out.")

    @classmethod
    def default_for(cls, name: str) -> "RunDir":
        return cls(default_out(name))

    @property
    def recipe(self) -> Path:
        return self.path / RECIPE

    @property
    def env(self) -> Path:
        return self.path / ENV

    @property
    def metrics(self) -> Path:
        return self.path / METRICS

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    @property
    def tensorboard(self) -> Path:
        return self.path / TENSORBOARD

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoints / LAST_CHECKPOINT

    @property
    def sharded_checkpoint(self) -> Path:
        """The newest sharded checkpoint's folder (accel.runs.sharded_checkpoint), through a link swapped atomically."""
        return self.checkpoints / SHARDED_LAST

    def read_summary(self) -> FitSummary | None:
        """summary.json, typed (accel.runs.records.read_summary: None, with a warning, when missing or unreadable)."""
        return read_summary(self.summary)

    def has_checkpoint(self) -> bool:
        return self.last_checkpoint.is_file() or self.sharded_checkpoint.is_dir()

    def resume_checkpoint(self) -> Path:
        """The checkpoint a resume continues from: the newer of last.pt and a sharded one (a run that changed
        strategy may hold both)."""
        found = [path for path in (self.last_checkpoint, self.sharded_checkpoint) if path.exists()]
        return max(found, key=lambda path: path.stat().st_mtime) if found else self.last_checkpoint

    @property
    def profile(self) -> Path:
        """The folder `accel train --profile` writes its report into (the files of `accel profile --out`)."""
        return self.path / PROFILE

    @property
    def oom_snapshot(self) -> Path:
        return self.path / OOM_SNAPSHOT

    def epoch_checkpoint(self, epoch: int) -> Path:
        return self.checkpoints / EPOCH_CHECKPOINT.format(epoch=epoch)

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
        if self.has_checkpoint():
            what = (
                f"Continue it with `{resume_command(self.path)}`, or start a new run in another folder "
                "(a different --out)."
            )
        else:
            what = self.start_over()
        raise AccelError(
            f"{self.path} already holds a run{f' ({status})' if status else ''}; accel never overwrites one. {what}"
        )

    def start_over(self) -> str:
        """What to do with a run that ended before its first checkpoint: nothing in it can be resumed."""
        return (
            "It has no checkpoint, so it cannot be resumed: to start it over there, remove the folder first "
            f"(`rm -r {shlex.quote(str(self.path))}`: only you can decide to delete a run), or start the new run in "
            "another folder (a different --out)."
        )

    def check_resumable(self, epochs: int, max_steps: int | None) -> None:
        """Refuse a --resume that would rewrite a finished result: a completed run asked for no more training
        than it did, or a diverged one (it would continue from the same weights and optimizer state)."""
        summary = self.read_summary()
        if summary is None:
            return
        status, done = summary.status, summary.steps if max_steps else summary.epochs
        if status == "diverged":
            raise AccelError(
                f"{self.path} holds a run that diverged at step {summary.diverged_at_step}: "
                "resuming it would continue from the same weights and optimizer state (its learning "
                "rate included), so nothing in it was changed. Start a new run in another folder (a "
                "different --out) with a lower optim.lr or train.clip_grad_norm."
            )
        wanted = max_steps or epochs
        if status != "completed" or not isinstance(done, int) or wanted > done:
            return
        unit, key = ("steps", "train.max_steps") if max_steps else ("epochs", "train.epochs")
        raise AccelError(
            f"{self.path} holds a completed run ({done} {unit}), and this recipe asks for no more ({key} {wanted}): "
            "--resume would train nothing and rewrite its results, so nothing in it was changed. To train it longer, "
            f"resume with a larger budget (`{resume_command(self.path)} --set {key}={done * 2}`; a learning-rate "
            "schedule planned for the old length cannot be continued), or start a new run in another folder."
        )

    def _status(self) -> str | None:
        summary = self.read_summary()
        return summary.status if summary is not None else None

    def remove_stale_temp_files(self) -> list[Path]:
        """Delete the temporary files and folders of checkpoint writes that a killed process left behind."""
        stale = sorted(self.checkpoints.glob(".*.tmp")) if self.checkpoints.is_dir() else []
        for path in stale:
            if path.is_dir() and not path.is_symlink():  # a sharded checkpoint's unfinished folder
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        return stale

    def clear_unsaved_attempt(self) -> None:
        """Remove what a run that died before its first checkpoint wrote, so that it can start over here."""
        for path in (self.recipe, self.env, self.metrics, self.summary):
            path.unlink(missing_ok=True)
        shutil.rmtree(self.tensorboard, ignore_errors=True)
        self.remove_stale_temp_files()
        if self.checkpoints.is_dir() and not any(self.checkpoints.iterdir()):
            self.checkpoints.rmdir()  # anything else in it stays, and check_new then refuses the folder

    def write_text(self, name: str, text: str) -> Path:
        return write_atomic(self.path / name, text)

    def write_json(self, name: str, data: Any) -> Path:
        return self.write_text(name, strict_json(data, indent=2) + "\n")

    def write_start(self, recipe_yaml: str, env: dict[str, Any]) -> None:
        """What a run writes before training: its resolved recipe and its environment."""
        self.write_text(RECIPE, recipe_yaml)
        self.write_json(ENV, env)

    def write_summary(self, summary: FitSummary) -> Path:
        """summary.json, or, where it cannot be replaced (permissions, an immutable file), an error that holds
        the summary and says the file on disk is out of date: the run's result is never lost or misread."""
        try:
            return self.write_text(SUMMARY, summary.to_json(indent=2) + "\n")
        except OSError as err:
            earlier = self._status()
            stale = (
                f"it still holds an earlier summary (status {earlier!r}), which is now out of date"
                if self.summary.exists()
                else "the run has no summary.json"
            )
            raise AccelError(
                f"the run ended ({summary.status}), but {self.summary} could not be written "
                f"({err.strerror or err}): {stale}. Its summary follows; make the file writable and save it "
                f"there:\n{summary.to_json(indent=2)}"
            ) from None


def check_results_out(path: str | Path, command: str, flag: str = "--out") -> None:
    """Refuse an --out for `accel bench`, `tune`, `bench-data`, `profile` or `export` that holds a run or earlier
    results, is a file, or cannot be made (under a file, not writable): what the command writes would overwrite
    and mix with them, as `RunDir.check_new` refuses for `accel train`, or fail only once the work is done."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise AccelError(f"{path} is a file; `accel {command}` writes a folder there. Choose another {flag}.")
    check_creatable(path, flag)
    check_free(path, "its results", flag)
    unfinished = _unfinished_trials(path)
    if unfinished:
        raise AccelError(
            f"{path} holds the trials of an `accel bench` or `accel tune` that was killed before it wrote its "
            f"report (no report.json or tune.json; its finished trials' records and logs are in "
            f"{', '.join(map(str, unfinished))}). accel never overwrites them: choose another {flag}, or delete "
            f"{path} to run there again."
        )
    held = [name for name in RUN_FILES + BENCH_FILES if (path / name).exists()]
    if held:
        what = "a run" if set(held) & set(RUN_FILES) else "earlier results"
        raise AccelError(
            f"{path} already holds {what} ({', '.join(held)}); accel never overwrites one. Choose another {flag}."
        )


def _unfinished_trials(path: Path) -> list[Path]:
    """The trials/ folders of a bench (OUT/trials) or tune (WORK/STAGE/trials) with no report to end them."""
    if not path.is_dir() or any((path / name).exists() for name in ("report.json", "tune.json")):
        return []
    return sorted(p for p in [path / "trials", *path.glob("*/trials")] if p.is_dir())


def epoch_checkpoints(folder: Path) -> list[Path]:
    """The epoch-NNN.pt files accel wrote in `folder`, oldest first, by epoch number: by name, epoch-1000.pt
    would sort before epoch-999.pt (NNN has at least three digits, more past epoch 999). Only names accel writes
    count: `checkpoint.keep` deletes what this returns, and a user's epoch-best.pt, epoch-001-good.pt or
    epoch-12.pt beside them is not accel's to delete."""
    epochs = {}
    for path in folder.glob("epoch-*.pt"):
        number = path.stem.removeprefix("epoch-")
        # ASCII digits only (str.isdigit takes "²" and other scripts' digits), and exactly as accel formats them
        ours = number.isascii() and number.isdigit() and path.name == EPOCH_CHECKPOINT.format(epoch=int(number))
        if ours and path.is_file():
            epochs[path] = int(number)
    return sorted(epochs, key=epochs.__getitem__)


def resume_command(path: Path) -> str:
    """The command that continues the run in `path` with its own resolved recipe, quoted for a shell."""
    recipe = RunDir(path, create=False).recipe
    return f"accel train {shlex.quote(str(recipe))} --out {shlex.quote(str(path))} --resume"


def cut_metrics(path: Path, step: int) -> None:
    """Keep the records of `path` up to optimizer step `step`, the point a resumed run continues from, and drop
    lines that are not JSON (a record cut by a killed process); rewritten atomically, and only when it changes."""
    lines = path.read_text(errors="replace").splitlines()
    kept = [line for line in lines if _record_step(line) is not None and _record_step(line) <= step]
    if len(kept) == len(lines):
        return
    write_atomic(path, "".join(line + "\n" for line in kept))
    log.info(
        "metrics.jsonl: dropped %d record(s) after step %d or cut by the interruption; the resumed run logs them again",
        len(lines) - len(kept),
        step,
    )


def _record_step(line: str) -> float | None:
    """The record's optimizer step (0 for a record without one), or None for a line that is not a record. Not
    `records.parse_record`: this only filters lines, and must keep an older accel's records as they are."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    step = record.get("step", 0)
    return step if isinstance(step, (int, float)) else 0
