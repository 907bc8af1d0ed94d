"""The run's own records, typed: summary.json (`FitSummary`; a user's own loop writes a `LoopSummary`) and the lines
of metrics.jsonl (`StepRecord`, `EpochRecord`, `EvalRecord`, and the own loop's `LoopRecord`). A misspelt field
fails where a record is built or read; JSON exists only at the write (`to_json`) and the read (`read_summary`,
`read_metrics`, `parse_record`).

The files keep the shape users' scripts read (docs/architecture.md, "Contracts kept for users"): a record's
open-ended names (the task's metrics, `val_accuracy`...; a speed-up's, `compile/recompiles`) are typed mappings
here and written flat beside the record's fields, as they always were."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer

from ..io import strict_json

log = logging.getLogger("accel")

Status = Literal["completed", "interrupted", "preempted", "failed", "diverged"]
Number = int | float  # as the run measured it: an int stays an int in the file
Metrics = dict[str, Number | None]  # a task's metrics by name; None where a non-finite value was written as null


class _Record(BaseModel):
    # NaN is a record's fact (a diverged loss), unlike a config's: it becomes null only at the write
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def to_json(self, **kwargs: Any) -> str:
        """The record as written to its file: the fields it was given (an optional one left out stays out, as
        before the records were typed), strict JSON (NaN becomes null)."""
        return strict_json(self.model_dump(mode="json", exclude_unset=True), **kwargs)


class FitSummary(_Record):
    """summary.json: how a fit ended and what it measured, its fields in the order the file has them. Only
    DESIGN.md's first fields are required: the rest came later, and a summary written before them reads with their
    defaults."""

    status: Status
    metrics: Metrics = Field(description="val_accuracy, val_loss (null where not measured), train_loss, the task's")
    samples_per_s: Number | None
    tokens_per_s: Number | None = Field(None, description="written only for a task that counts tokens")
    train_s: Number | None = None
    first_step_s: Number | None = None
    data_wait_fraction: Number | None = None
    wall_s: Number
    startup_s: Number | None = None
    steps: int
    epochs: int | float = Field(description="whole epochs, or with the share of the one the run stopped in")
    flops_per_step: Number | None = None
    flop_per_s: Number | None = None
    mfu: Number | None = None
    peak_flop_per_s: Number | None = None
    peak_source: str | None = None
    device: str
    diverged_at_step: int | None = None
    speedups: list[str] = []
    skipped_speedups: dict[str, str] = {}
    strategy: str = "plain"
    speedup_metrics: dict[str, dict[str, Any]] = {}
    lint: list[dict[str, str]] = []
    busy: str | None = Field(None, description="written only where the machine was busy while the run trained")
    run_dir: str | None = Field(None, description="written only where the run has a run directory")


class LoopSummary(_Record):
    """summary.json of a user's own loop (`eng.summary()`, written by `eng.close()` with an `out`)."""

    steps: int
    samples: int
    tokens: int | None = None
    wall_s: Number
    samples_per_s: Number | None = Field(None, description="after the first step")
    flops_per_sample: Number | None = None
    flop_per_s: Number | None = Field(None, description="written only where the FLOPs were counted")
    mfu: Number | None = Field(None, description="written only where the FLOPs were counted")
    tokens_per_s: Number | None = None
    data_wait_fraction: Number | None = None
    device: str
    precision: str = "fp32"
    strategy: str = "plain"
    speedups: list[str] = []
    skipped_speedups: dict[str, str] = {}
    speedup_metrics: dict[str, dict[str, Any]] = {}
    metrics: dict[str, Any] = Field({}, description="the last value of each name the script logged, `step` too")
    lint: list[dict[str, str]] = []


class _FlatRecord(_Record):
    """A metrics.jsonl line: its fields, then the open-ended names written flat beside them: the task's metrics
    (`metrics`) and, on an epoch record, each speed-up's as `NAME/KEY` (`parts`). Built in code, a misspelt
    field fails; read back, a name that is not a field can only be an open-ended one (a number or null), so a
    misspelt field there fails as missing, or reads as a metric of that name, not as a field's None."""

    kind: ClassVar[str]

    @classmethod
    def from_flat(cls, data: dict[str, Any]) -> _FlatRecord:
        """The record whose written form is `data` (a metrics.jsonl line's object)."""
        fields = {key: value for key, value in data.items() if key in cls.model_fields}
        names = {key: value for key, value in data.items() if key not in cls.model_fields and key != "kind"}
        if "parts" in cls.model_fields:
            for key in [key for key in names if "/" in key]:
                name, _, metric = key.partition("/")
                fields.setdefault("parts", {}).setdefault(name, {})[metric] = names.pop(key)
        if names or "metrics" in cls.model_fields:
            fields["metrics"] = names  # a record without open-ended names refuses any
        return cls.model_validate(fields)

    @model_serializer(mode="wrap")
    def _flatten(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        metrics, parts = data.pop("metrics", {}), data.pop("parts", {})
        flat_parts = {f"{name}/{key}": value for name, values in parts.items() for key, value in values.items()}
        return ({"kind": self.kind} if self.kind else {}) | data | metrics | flat_parts


class StepRecord(_FlatRecord):
    """Every `log.every_steps` optimizer steps: the window's loss and speed."""

    kind: ClassVar[str] = "step"
    epoch: int = Field(description="the epoch the step is in, counted from 1")
    step: int
    lr: Number
    loss: Number | None
    samples_per_s: Number
    tokens_per_s: Number | None = None
    data_wait_fraction: Number
    flop_per_s: Number | None = None
    mfu: Number | None = None


class EvalRecord(_FlatRecord):
    """An evaluation between epochs (`train.eval_every_steps`): the task's metrics only."""

    kind: ClassVar[str] = "eval"
    epoch: int
    step: int
    metrics: Metrics


class EpochRecord(_FlatRecord):
    """An epoch's end: its speed, the task's metrics where it was evaluated, each speed-up's metrics (written
    `NAME/KEY`)."""

    kind: ClassVar[str] = "epoch"
    epoch: int
    step: int
    lr: Number
    samples_per_s: Number
    tokens_per_s: Number | None = None
    data_wait_fraction: Number
    flop_per_s: Number | None = None
    mfu: Number | None = None
    train_loss: Number | None
    metrics: Metrics = Field({}, description="the task's, where the epoch ended with an evaluation")
    parts: dict[str, dict[str, Any]] = Field({}, description="each speed-up's (and the strategy's) metrics")

    def named(self, name: str) -> Any:
        """A field or metric by the name metrics.jsonl gives it (a user's `early_stopping.monitor`); None if absent."""
        return self.model_dump().get(name)


class LoopRecord(_FlatRecord):
    """`eng.log(...)` in a user's own loop: the step and whatever the script logged (no `kind` in the file)."""

    kind: ClassVar[str] = ""
    step: int
    metrics: dict[str, Any] = {}  # the script's own names and values


_BY_KIND: dict[str, type[_FlatRecord]] = {"step": StepRecord, "eval": EvalRecord, "epoch": EpochRecord, "": LoopRecord}
Record = StepRecord | EvalRecord | EpochRecord | LoopRecord


def parse_record(line: str) -> Record:
    """One metrics.jsonl line as its record; ValueError (a ValidationError among them) for a line that is not one."""
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError(f"a metrics.jsonl record is a JSON object, not a {type(data).__name__}")
    kind = data.get("kind", "")
    if kind not in _BY_KIND:
        raise ValueError(f"a metrics.jsonl record of kind {kind!r}: the kinds are step, eval, epoch")
    return _BY_KIND[kind].from_flat(data)


def read_metrics(path: Path) -> list[Record]:
    """Every record of a metrics.jsonl, in order; a line that is not one fails with its number."""
    records = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        try:
            records.append(parse_record(line))
        except ValueError as err:
            raise ValueError(f"{path}, line {number}: {err}") from None
    return records


def read_summary(path: Path) -> FitSummary | None:
    """The summary.json at `path`; None, with a warning that names it, when it is missing, unreadable or not a
    summary (a copy cut short, an edit): every command that reads one goes on without it."""
    if not path.is_file():
        return None
    try:
        return FitSummary.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as err:
        log.warning("%s is unreadable or not a run summary (%s); going on without it", path, _why(err))
        return None


def _why(err: Exception) -> str:
    """What was wrong, by field: `stpes: Extra inputs are not permitted` (invalid JSON is one error too)."""
    if not isinstance(err, ValidationError):
        return str(err)
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the file'}: {e['msg']}" for e in err.errors()[:3])
