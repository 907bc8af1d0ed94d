"""The step machinery the Trainer and any hand-written loop share, and the one count of its steps: the device, the
module and the slots speed-ups may replace, the optimizer, the strategy with its precision, the speed-ups,
accumulation and clipping; micro-batches, the accumulation boundary, optimizer steps, samples and tokens; the
observers told of each step.

Speed-ups and strategies set themselves up against the core (`setup(engine)`) and change what a step calls only
through `replace`, which records how to undo it: teardown restores every slot in reverse, so no speed-up restores
its own. The slots:
- `model`: what a forward calls (the module, DDP-wrapped, compiled);
- `forward_loss(batch)`: forward and loss (whole-step compilation replaces it);
- `step_batch(batch, boundary)`: forward, loss, backward and, at an accumulation boundary, the optimizer step
  (a captured CUDA graph replaces it).

Two drivers hold a core and import nothing of each other: the recipe's Trainer (accel.train.trainer) and a
hand-written loop's `accel.Engine` (accel.engine.own_loop). The core imports neither, nor the bench: a trial or a
profile joins it as an observer.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from .. import devices
from ..batches import map_tensors
from ..errors import AccelError
from ..measure.anatomy import Anatomy
from ..optimizers.traits import optimizer_traits
from ..runs.rng import rng_state, set_rng_state
from ..speedups import RunFacts, Speedup, precision_of, refuse, resolve, setup_order
from ..strategy import Strategy
from ..strategy.world import World

SLOTS = ("model", "forward_loss", "step_batch")
Counter = Callable[[Any], tuple[int, int | None]]  # a batch -> (samples, tokens or None): the driver's reading


@dataclass
class StepCount:
    """What the core counted: micro-batches since the last optimizer step, optimizer steps, samples and tokens of
    the training batches, and the seconds spent waiting for them (a loader the engine iterates)."""

    micro_batches: int = 0
    steps: int = 0
    samples: int = 0
    tokens: int = 0
    data_s: float = 0.0


class Ran(NamedTuple):
    """What `run_step` did: the loss (detached), whether the optimizer stepped, the batch's samples and tokens."""

    loss: torch.Tensor
    stepped: bool
    samples: int
    tokens: int | None


class Observer:
    """Told of a core's events; every hook does nothing unless overridden. A bench trial, a profile window and a
    loop's own bookkeeping observe; none changes the step."""

    def set_up(self) -> None:
        """The driver's model is set up with every speed-up."""

    def loss(self, loss: torch.Tensor, share: int) -> None:
        """A micro-batch's loss, undivided (`share`: the micro-batches it is to be divided by)."""

    def stepped(self) -> None:
        """An optimizer step has ended and been counted."""

    def logged(self, record: dict[str, Any]) -> None:
        """The driver logged metrics."""


HOOKS = ("set_up", "loss", "stepped", "logged")


class Core:
    """One training step's machinery on one device, for one module and one optimizer, and its count."""

    def __init__(
        self,
        speedups: list[Speedup],
        *,
        device: str | torch.device = "auto",
        strategy: Strategy | None = None,
        world: World | None = None,
        grad_accum: int = 1,
        clip_grad_norm: float | None = None,
        strict: bool = False,
        from_script: bool = False,
        counter: Counter | None = None,
    ):
        """`speedups`: built Speed-up objects; `from_script`: a hand-written loop's (the conflict rule asks more of
        it); `counter`: how a training batch's samples and tokens are read (None: not counted)."""
        self.from_script = from_script
        self.device = devices.resolve_device(device) if isinstance(device, str) else device
        self.world = world or World()
        self.strategy = strategy or Strategy()
        self.speedups, self.skipped_speedups = resolve(list(speedups), self.device, self.strategy, strict)
        self.strategy.use(precision_of(self.speedups), self.device)
        self.grad_accum, self.clip_grad_norm = checked_grad_accum(grad_accum), clip_grad_norm
        self.anatomy = Anatomy(self.device)  # the step's phases, timed while a profiler records (accel.measure.anatomy)
        self.module: nn.Module | None = None  # the plain module: weights, checkpoints
        self.model: Any = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: Any = None
        self.train_loader: Any = None
        self.task: str | None = None  # the recipe's task, named to the conflict rule (a hand-written loop's: None)
        self.forward_loss: Callable[[Any], torch.Tensor] = self._forward_loss
        self.step_batch: Callable[[Any, bool], torch.Tensor] = self._step_batch
        self.loss: Callable[[Any], torch.Tensor] | None = None  # forward and loss of one batch, eager
        self.count = StepCount()
        self.counter = counter
        self.observers: list[Observer] = []
        # each hook's overriding observers, bound: a step calls only those with something to do
        # hook -> the observers' methods for it, read by `tell` (and inline by a loop's backward, every micro-batch)
        self.told: dict[str, tuple[Callable[..., None], ...]] = {hook: () for hook in HOOKS}
        self.scheduled = False  # the driver steps a schedule of its own (the conflict rule's fact)
        self.set_up_at: float | None = None  # when the speed-ups' setup ended
        self._prepares = [s for s in self.speedups if type(s).prepare_batch is not Speedup.prepare_batch]
        self._undo: list[tuple[str, Any]] = []  # (slot, value before), in the order replaced
        self._set_up = False  # the speed-ups' setup has run and their teardown has not
        # resolved once, here: what a loop's own step would be refused for is known now
        self.whole_step = next((s.name for s in self.speedups if s.replaces_step()), None)

    @property
    def steps(self) -> int:
        """Optimizer steps taken (a checkpoint's count after a load)."""
        return self.count.steps

    @steps.setter
    def steps(self, value: int) -> None:
        self.count.steps = value

    # ---- what it trains -----------------------------------------------------------------------------
    def attach(self, module: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None) -> None:
        """The module (moved to the device) and the optimizer that owns its parameters."""
        _check_materialised(module)
        self.module = self.model = module.to(self.device)
        self.optimizer, self.scheduler = optimizer, scheduler
        _check_optimizer_owns(self.module, optimizer)

    def replace(self, slot: str, value: Any) -> None:
        """Put `value` in `slot` (accel.engine.core's docstring names them); teardown puts back what was there."""
        if slot not in SLOTS:
            raise ValueError(f"no engine slot {slot!r}; the slots are {', '.join(SLOTS)}")
        self._undo.append((slot, getattr(self, slot)))
        setattr(self, slot, value)

    # ---- set up and torn down -----------------------------------------------------------------------
    def setup_speedups(self) -> None:
        """Set up the speed-ups and the strategy, once, phase by phase (accel.strategy.setup_phases). Speed-ups the
        other choices rule out are refused first (`refuse_speedups`); a failed setup undoes the ones before it."""
        if self._set_up:
            return
        self.refuse_speedups()
        parts = self.parts()
        for i, part in enumerate(parts):
            try:
                part.setup(self)
            except BaseException:  # undo the ones already set up: their global flags must not leak
                self._tear_down(parts[:i])
                raise
        self._set_up, self.set_up_at = True, time.perf_counter()

    def refuse_speedups(self) -> None:
        """Refuse the speed-ups that the strategy, the other speed-ups or the run's own choices rule out, all named
        at once (accel.speedups.refuse)."""
        precision, facts = self.strategy.precision.name, self.run_facts()
        refuse(self.speedups, self.device, self.strategy, precision, self.from_script, facts)

    def precision_speedup(self) -> str | None:
        """The name of the speed-up that gives the precision (amp), for messages; None in fp32."""
        return next((s.name for s in self.speedups if s.precision() is not None), None)

    def run_facts(self) -> RunFacts:
        """What the conflict rule sees of the run's own choices: accumulation, the training loader, the optimizer
        and its schedule, the task (each as far as the engine knows it yet)."""
        return RunFacts(
            grad_accum=self.grad_accum,
            drop_last=getattr(self.train_loader, "drop_last", None),
            optimizer=optimizer_traits(self.optimizer) if self.optimizer is not None else None,
            scheduled=self.scheduler is not None or self.scheduled,  # the Trainer's, or a loop's own
            task=self.task,
        )

    def part_metrics(self) -> dict[str, dict[str, Any]]:
        """Each speed-up's metrics, and the strategy's where it has any (XLA's compilations): a summary's
        `speedup_metrics`, the Trainer's and a loop's alike."""
        strategy = self.strategy.metrics()
        return {s.name: s.metrics() for s in self.speedups} | ({self.strategy.name: strategy} if strategy else {})

    def own_state(self) -> dict[str, Any]:
        """What the core keeps in a checkpoint, the Trainer's and a loop's (`eng.save`) alike: the speed-ups' state
        (the GradScaler's scale, EMA weights), the random state, the optimizer steps."""
        return {"speedups": {s.name: s.state_dict() for s in self.speedups}, "rng": rng_state(), "steps": self.steps}

    def load_own_state(self, state: dict[str, Any]) -> None:
        """What `own_state` gave, put back; the speed-ups are set up first, so their state goes into the objects
        that will use it. An older checkpoint without the random state (None) leaves it as it is."""
        self.setup_speedups()
        for speedup in self.speedups:
            speedup.load_state_dict(state["speedups"].get(speedup.name, {}))
        if state["rng"] is not None:
            set_rng_state(state["rng"])
        self.steps = state["steps"]

    def teardown(self) -> None:
        """Undo every speed-up and the strategy, and put every slot back: the engine is as attached."""
        if self._set_up:
            self._set_up = False
            self._tear_down(self.parts())

    def parts(self) -> list[Any]:
        """The speed-ups and the strategy, in setup order."""
        return setup_order([*self.speedups, self.strategy])

    def _tear_down(self, parts: list[Any]) -> None:
        try:
            for part in reversed(parts):
                part.teardown()
        finally:
            while self._undo:
                slot, value = self._undo.pop()
                setattr(self, slot, value)

    # ---- the count -----------------------------------------------------------------------------------
    def micro_batch(self, last: bool = False) -> bool:
        """A micro-batch begins; whether it ends an optimizer step: every `grad_accum`-th, or the last of an
        epoch (`last`), whose partial accumulation steps rather than carrying into the next epoch."""
        self.count.micro_batches += 1
        return last or self.count.micro_batches % self.grad_accum == 0

    def count_batch(self, batch: Any) -> tuple[int, int | None]:
        """Count a training batch's samples and tokens through the driver's counter; (samples, tokens), tokens
        None where the batch holds none."""
        if self.counter is None:
            return 0, None
        samples, tokens = self.counter(batch)
        self.count.samples += samples
        self.count.tokens += tokens or 0
        return samples, tokens

    def observe(self, observer: Observer) -> None:
        """From now on `observer` is told of the core's events (after those observing already)."""
        self.observers.append(observer)
        self._tell_anew()

    def ignore(self, observer: Observer) -> None:
        """`observer` is told nothing more (an observer may say so from its own hook)."""
        self.observers.remove(observer)
        self._tell_anew()

    def _tell_anew(self) -> None:
        # tuples, rebuilt on each change: a hook that unsubscribes leaves the loop it runs in untouched
        self.told = {
            hook: tuple(
                getattr(o, hook) for o in self.observers if getattr(type(o), hook) is not getattr(Observer, hook)
            )
            for hook in HOOKS
        }

    def count_step(self) -> None:
        """An optimizer step ended: count it, and tell the observers."""
        self.count.steps += 1
        self.count.micro_batches = 0
        for stepped in self.told["stepped"]:
            stepped()

    def tell(self, hook: str, *args: Any) -> None:
        """Tell the observers of an event the driver saw (`set_up`, `loss`, `logged`)."""
        for told in self.told[hook]:
            told(*args)

    # ---- one step -----------------------------------------------------------------------------------
    def run_step(self, batch: Any, last: bool = False) -> Ran:
        """One micro-batch's whole step, as the Trainer and a loop's `compile_step` run it: through the `step_batch`
        slot (the optimizer steps at the boundary), then counted, with the speed-ups' `after_batch`, and observed.
        `last`: the epoch's last batch, which ends a step whatever the accumulation."""
        boundary = self.micro_batch(last)
        loss = self.step_batch(batch, boundary)
        samples, tokens = self.count_batch(batch)
        self.after_batch()
        self.tell("loss", loss, self.grad_accum)
        if boundary:
            self.count_step()
        return Ran(loss.detach(), boundary, samples, tokens)

    def _step_batch(self, batch: Any, boundary: bool) -> torch.Tensor:
        """Forward and loss under the step contexts, the strategy's backward and, at a boundary, its step."""
        with nullcontext() if boundary else self.strategy.no_sync(self.module):
            loss = self.forward_backward(batch)
        if boundary:
            with self.anatomy.phase("optimizer"):
                self.finish_step(self.optimizer_step())
        return loss

    def forward_backward(self, batch: Any) -> torch.Tensor:
        """Forward and loss under the step contexts, then the strategy's backward of this micro-batch's share."""
        with self.anatomy.phase("loss"), self.step_contexts():
            loss = self.forward_loss(batch)
        with self.anatomy.phase("backward"):
            self.strategy.backward(loss / self.grad_accum if self.grad_accum > 1 else loss)
        return loss

    def _forward_loss(self, batch: Any) -> torch.Tensor:
        return self.loss(batch)

    def optimizer_step(self) -> bool:
        """Clip and step through the strategy and its precision; False when the GradScaler skipped the step."""
        return self.strategy.optimizer_step(self.optimizer, self.clip_configured)

    def finish_step(self, applied: bool) -> None:
        """The host's part after an optimizer step (`applied`: not skipped by the GradScaler): clear the gradients,
        advance the Trainer's schedule (a hand-written loop steps its own: accel.engine.schedule). A captured step
        replays the numeric part and then calls this; `run_step` counts the step after it."""
        self.optimizer.zero_grad(set_to_none=True)
        if applied and self.scheduler is not None:  # a step the GradScaler skipped does not advance the schedule
            self.scheduler.step()

    def clip_configured(self) -> None:
        """Called by the strategy's precision after unscaling and before the optimizer step."""
        if self.clip_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.module.parameters(), self.clip_grad_norm)

    def step_contexts(self) -> ExitStack:
        """The precision's autocast and every speed-up's step context, around forward and loss."""
        stack = ExitStack()
        stack.enter_context(self.strategy.precision.forward_context())
        for speedup in self.speedups:
            stack.enter_context(speedup.step_context())
        return stack

    def after_batch(self) -> None:
        if not self.speedups:  # no empty `speedups` phase in a profile (a loop's step asks before calling)
            return
        with self.anatomy.phase("speedups"):
            for speedup in self.speedups:
                speedup.after_batch()

    # ---- batches ------------------------------------------------------------------------------------
    def on_device(self, batch: Any, transform: Callable | None = None) -> Any:
        """The batch on the device, through the (inputs, targets) transform, with every image-shaped tensor
        prepared by the speed-ups (memory format); other tensors (targets, token ids, masks) pass untouched."""
        batch = devices.to_device(batch, self.device, non_blocking=True)
        if transform is not None:
            batch = transform(*batch)
        if self._prepares:
            batch = map_tensors(self._prepare_images, batch)
        return batch

    def _prepare_images(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() != 4 or not tensor.is_floating_point():
            return tensor
        for speedup in self._prepares:
            tensor = speedup.prepare_batch(tensor)
        return tensor

    def eval_contexts(self) -> AbstractContextManager:
        """Every speed-up's context around a whole evaluation pass (EMA's averaged weights)."""
        stack = ExitStack()
        for speedup in self.speedups:
            stack.enter_context(speedup.eval_context())
        return stack


def checked_grad_accum(grad_accum: Any) -> int:
    """Micro-batches per optimizer step: 0 divided by zero at the first `backward`, and -1 trained as 1."""
    if isinstance(grad_accum, bool) or not isinstance(grad_accum, numbers.Integral) or grad_accum < 1:
        raise AccelError(
            f"accel.Engine(grad_accum={grad_accum!r}): micro-batches per optimizer step, a whole number of at "
            "least 1 (1: a step after every micro-batch, the default; 4: a step after every fourth)."
        )
    return int(grad_accum)


def _check_materialised(module: nn.Module) -> None:
    """A model built on the meta device has shapes but no values: torch's error at `.to()` says only that it
    cannot copy them, not where they went missing or what to do."""
    meta = next(
        (name for name, tensor in [*module.named_parameters(), *module.named_buffers()] if tensor.is_meta), None
    )
    if meta is not None:
        raise AccelError(
            f"the model's `{meta}` is on the meta device (built under `torch.device('meta')` or an empty-weights "
            "context): it has a shape but no values to train. Give it values first: `model.to_empty(device=...)` "
            "and then initialise it (its `reset_parameters()`) or load a state_dict."
        )


def _check_optimizer_owns(module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    mine = {id(p) for p in module.parameters()}
    if any(id(p) not in mine for group in optimizer.param_groups for p in group["params"]):
        raise AccelError(
            "the optimizer holds tensors that are not the model's parameters. Moving a model to some "
            "devices (XLA) replaces its parameters: create the optimizer after `model.to(device)`."
        )
