"""The speed-up interface the trainer drives. Every hook does nothing by default, so the loop stays plain.

A speed-up declares itself on its class: the `phase` its setup runs in, the `needs` model trait without which it
does nothing, the `tune` candidates `accel tune` tries, `conflict`, the one place it says why it cannot run (the
device, the precision, the strategy, the other speed-ups and the run's own choices, `RunFacts`), and the traits
other rooms read instead of its name (`compiles_model`, `reports_compile`, `lint_finding`, `evaluated_weights`,
`optimizer_impl`). Nothing elsewhere names a speed-up: registering the class is all it takes
(tests/speedups/test_one_file.py).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from pydantic import Field

from ..measure.traps import Finding
from ..optimizers.traits import OptimizerTraits
from ..registry import SPEEDUPS
from ..schema import StrictModel
from ..strategy.precision import Precision
from ..strategy.setup_phases import Phase

if TYPE_CHECKING:
    from ..strategy.slots import Slots


@dataclass(frozen=True)
class RunFacts:
    """The run's own choices beyond its strategy and speed-ups that a speed-up may be refused for, known before
    setup: the engine fills them (a recipe's, through the Trainer, or a hand-written loop's), tune from its
    subject. The defaults mean "not known" (a refusal needs the fact)."""

    grad_accum: int = 1  # micro-batches per optimizer step
    drop_last: bool | None = None  # the training loader drops its last incomplete batch: every batch one shape
    optimizer: OptimizerTraits | None = None
    scheduled: bool = False  # a schedule changes the learning rate between steps
    task: str | None = None  # the recipe's task (`classification`, ...); a hand-written loop's loss is its own

    def to_data(self) -> dict[str, Any]:
        optimizer = self.optimizer.to_data() if self.optimizer is not None else None
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"optimizer": optimizer}

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> RunFacts:
        """What `to_data` wrote (a script's probe); None: nothing known."""
        if not data:
            return cls()
        optimizer = data.get("optimizer")
        return cls(**{**data, "optimizer": OptimizerTraits.from_data(optimizer) if optimizer else None})


NOTHING_KNOWN = RunFacts()  # a context without the run's facts: a rule judges by device, precision and strategy


@dataclass(frozen=True)
class Context:
    """Where a speed-up would run: the device, the numeric precision (`fp32`, `bf16`, `fp16`; None where it is
    not known yet, as for tune's candidates: judge by the device alone), the strategy (`plain`, `ddp`, `fsdp`,
    `xla`), the other speed-ups that will run beside it and the run's own choices (`run`)."""

    device: torch.device
    precision: str | None = None
    strategy: str = "plain"
    others: tuple[Speedup, ...] = ()
    run: RunFacts = NOTHING_KNOWN


@dataclass(frozen=True)
class Candidate:
    """One setting `accel tune` tries for a speed-up: `patch` over the recipe's section; `needs`: the model trait
    it needs beyond the speed-up's own; `cuda_only`: it pays off on GPUs only (elsewhere it only costs time)."""

    patch: dict[str, Any] = field(default_factory=dict)
    needs: str | None = None
    cuda_only: bool = False


class SpeedupConfig(StrictModel):
    enabled: bool = Field(True, description="false gives exactly the code path of not listing the speed-up")


def registered(name: str) -> Callable[[type[Speedup]], type[Speedup]]:
    """`@registered("amp")`: the speed-up by that name in recipes (the SPEEDUPS registry), and its `name`."""

    def add(cls: type[Speedup]) -> type[Speedup]:
        cls.name = name
        return SPEEDUPS.register(name)(cls)

    return add


class Speedup:
    """One speed-up: a thin class around the pure functions that do the work. Hooks have no side effects
    except `setup`, `after_batch`, `end_epoch` and `teardown`, whose job they are."""

    name: ClassVar[str]  # given by `registered`
    phase: ClassVar[Phase] = Phase.MODEL
    needs: ClassVar[str | None] = None  # a model trait (accel.models.blocks.model_traits) it does nothing without
    tune: ClassVar[tuple[Candidate, ...]] = ()  # what `accel tune` tries, in order (off is always tried first)
    compiles_model: ClassVar[bool] = False  # it compiles the model: a loop's own torch.compile'd model is refused
    reports_compile: ClassVar[bool] = False  # its metrics carry torch.compile's `seconds`, `graph_breaks`, `recompiles`
    thread_count: ClassVar[str | None] = None  # its config field of torch's thread count (tune's --threads knob)
    lint_finding: ClassVar[Finding | None] = None  # what the speed lint says whenever it runs (superseded upstream)
    Config: ClassVar[type[SpeedupConfig]] = SpeedupConfig

    def __init__(self, cfg: SpeedupConfig | None = None):
        self.cfg = cfg if cfg is not None else self.Config()

    def conflict(self, context: Context) -> str | None:
        """Why this speed-up cannot run in `context`, or None when it can (accel.speedups.resolve applies it)."""
        return None

    def replaces_step(self) -> bool:
        """Whether it replaces the whole step (forward, loss and more), which a hand-written loop must then give
        as one function: `eng.compile_step(fn)`."""
        return False

    @classmethod
    def evaluated_weights(cls, cfg: SpeedupConfig, state: dict[str, Any]) -> dict[str, Any] | None:
        """The weights a run evaluated instead of its trained ones, from this speed-up's checkpointed `state`
        (`accel export` ships them), or None."""
        return None

    def optimizer_impl(self) -> str | None:
        """The optimizer implementation it asks for (`fused`, `foreach`, `for_loop`), or None: another speed-up that
        changes the optimizer's step judges what it can run beside."""
        return None

    def precision(self) -> Precision | None:
        """The numeric precision this speed-up gives the strategy (amp), or None."""
        return None

    def setup(self, engine: "Slots") -> None:
        """Transform the model, optimizer or loaders once, before the first step."""

    def prepare_batch(self, inputs: torch.Tensor) -> torch.Tensor:
        """Change each input batch on the device (e.g. its memory format)."""
        return inputs

    def step_context(self) -> AbstractContextManager:
        """Wraps forward and loss, in training and evaluation (e.g. the attention kernel)."""
        return nullcontext()

    def eval_context(self) -> AbstractContextManager:
        """Wraps a whole evaluation pass (e.g. swapping in averaged weights)."""
        return nullcontext()

    def counting_context(self) -> AbstractContextManager:
        """Wraps the count of a step's model FLOPs (e.g. without recomputed activations)."""
        return nullcontext()

    def after_batch(self) -> None:
        """After each training batch's backward (and step, where it stepped)."""

    def end_epoch(self) -> None:
        """At each epoch's end, before `metrics()` is read: say what the epoch showed (warnings)."""

    def metrics(self) -> dict[str, Any]:
        """Numbers worth a line in metrics.jsonl and summary.json (e.g. skipped steps, recompilations)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def teardown(self) -> None:
        """Restore every global flag setup changed, so runs in one process do not leak into each other."""


def one_program(speedup: Speedup, context: Context) -> str | None:
    """Two speed-ups of the COMPILE phase would each turn the model into another program: they cannot stack."""
    other = next((o for o in context.others if o.phase is Phase.COMPILE), None)
    if other is None:
        return None
    return (
        f"speed-ups `{speedup.name}` and `{other.name}` both turn the model into another program and cannot be "
        "stacked; enable one of them (`compile` is the maintained one)."
    )
