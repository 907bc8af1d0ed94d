"""The step machinery the Trainer and any hand-written loop share: the device, the module and the slots speed-ups
may replace, the optimizer, the strategy with its precision, the speed-ups, accumulation and clipping.

Speed-ups and strategies set themselves up against the engine (`setup(engine)`) and change what a step calls only
through `replace`, which records how to undo it: teardown restores every slot in reverse, so no speed-up restores
its own. The slots:
- `model`: what a forward calls (the module, DDP-wrapped, compiled);
- `forward_loss(batch)`: forward and loss (whole-step compilation replaces it);
- `step_batch(batch, boundary)`: forward, loss, backward and, at an accumulation boundary, the optimizer step
  (a captured CUDA graph replaces it).

A hand-written loop uses the same engine through its public methods (docs/own-loop.md):

    eng = accel.Engine(speedups={"amp": {"dtype": "bf16"}, "compile": {}})
    model, optimizer = eng.setup(model, optimizer)
    for x, y in eng.setup_dataloaders(loader):
        with eng.autocast():
            loss = F.cross_entropy(model(x), y)
        eng.backward(loss)
        optimizer.step()                 # through the strategy and precision
        optimizer.zero_grad(set_to_none=True)
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import devices
from ..batches import map_tensors
from ..errors import AccelError, say_uncaught_plainly
from ..measure.anatomy import Anatomy
from ..optimizers.traits import optimizer_traits
from ..speedups import RunFacts, Speedup, from_configs, precision_of, refuse, resolve, setup_order
from ..strategy import Strategy, choose
from ..strategy.world import World, init_process_group, world_from_env
from . import script_trial
from .loop_records import LoopRecords, records_folder
from .own_loop import LoopState, OwnLoop
from .ranks import Ranks
from .settings import engine_settings

SLOTS = ("model", "forward_loss", "step_batch")


class Engine(OwnLoop, LoopRecords, Ranks):
    """One training step's machinery on one device, for one module and one optimizer; a hand-written loop's
    methods come from OwnLoop (accel.engine.own_loop: the step), LoopRecords (accel.engine.loop_records: what it
    keeps and writes) and Ranks (accel.engine.ranks: a seed per rank, a print on rank 0)."""

    def __init__(
        self,
        speedups: Any = None,
        *,
        device: str | torch.device = "auto",
        strategy: Strategy | str | None = None,
        out: str | Path | None = None,
        grad_accum: int = 1,
        clip_grad_norm: float | None = None,
        strict: bool = False,
        world: World | None = None,
        optimizer: str | None = None,
    ):
        """`speedups`: a recipe's `speedups:` section (a mapping), a preset name (`"fast-cuda"`) or a YAML file
        (ACCEL_SET and ACCEL_SPEEDUPS override them: accel.engine.settings); the Trainer passes built Speed-up
        objects. `strategy`: "ddp" or "fsdp" under torchrun (ddp by default there). `out`: a folder for the
        run's records (metrics.jsonl from `log`, summary.json at `close`). `grad_accum`: micro-batches per
        optimizer step (a whole number, at least 1); all but a step's last skip the gradient reduction, and where
        the engine runs the step itself (the Trainer, `compile_step`) it divides the loss by it; a loop's own
        `backward` never divides.
        `optimizer`: None (the loop's own, the default) or "muon": `setup` then steps Muon on the hidden matrices
        and AdamW on the rest, built from the loop's optimizer (accel.optimizers.builders.muon_from)."""
        # refused before anything is set up (a process group, the device)
        grad_accum, out = _checked_grad_accum(grad_accum), records_folder(out)
        settings = None  # the Trainer's engine: built speed-ups, no settings of a script's own
        self.from_script = not _built(speedups)  # a hand-written loop's settings, not a recipe's
        if self.from_script:
            say_uncaught_plainly()
            given = strategy if isinstance(strategy, str) else None
            settings = engine_settings(speedups, str(device), given, optimizer=optimizer)
            world = world or world_from_env()
            device = init_process_group(world, devices.resolve_device(settings.device))
            strategy = choose(settings.strategy or "ddp", world, device)
            speedups = from_configs(settings.speedups)
        self.device = devices.resolve_device(device) if isinstance(device, str) else device
        self.world = world or World()
        self.strategy = strategy or Strategy()
        self.speedups, self.skipped_speedups = resolve(list(speedups), self.device, self.strategy, strict)
        self.strategy.use(precision_of(self.speedups), self.device)
        self.grad_accum, self.clip_grad_norm = grad_accum, clip_grad_norm
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
        self.steps = 0  # optimizer steps taken
        self._prepares = [s for s in self.speedups if type(s).prepare_batch is not Speedup.prepare_batch]
        self._undo: list[tuple[str, Any]] = []  # (slot, value before), in the order replaced
        self._set_up = False  # the speed-ups' setup has run and their teardown has not
        self.logged: list[dict[str, Any]] = []  # what the loop reported through `log`
        self.optimizer_setting = settings.optimizer if settings else None  # "muon": built at setup
        # the speed-ups are resolved once, here: what the loop's own step would be refused for is known now
        self._loop = LoopState(whole_step=next((s.name for s in self.speedups if s.replaces_step()), None))
        self._trial = script_trial.attach(self, settings)  # None unless `accel bench` runs the script
        # a trial's records are its own (the bench's record, the profile's report): `out` is the real run's folder
        self.out = out if self._trial is None else None

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
        self._set_up = True

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
            scheduled=self.scheduler is not None or self._loop.schedule is not None,  # the Trainer's, or a loop's
            task=self.task,
        )

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

    # ---- one step -----------------------------------------------------------------------------------
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
        advance the Trainer's schedule (a hand-written loop steps its own: accel.engine.schedule), count the step.
        A captured step replays the numeric part and then calls this."""
        self.optimizer.zero_grad(set_to_none=True)
        if applied and self.scheduler is not None:  # a step the GradScaler skipped does not advance the schedule
            self.scheduler.step()
        self.steps += 1

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
        if not self.speedups:  # every optimizer step of a plain loop passes here: nothing to time
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


def _checked_grad_accum(grad_accum: Any) -> int:
    """Micro-batches per optimizer step: 0 divided by zero at the first `backward`, and -1 trained as 1."""
    if isinstance(grad_accum, bool) or not isinstance(grad_accum, numbers.Integral) or grad_accum < 1:
        raise AccelError(
            f"accel.Engine(grad_accum={grad_accum!r}): micro-batches per optimizer step, a whole number of at "
            "least 1 (1: a step after every micro-batch, the default; 4: a step after every fourth)."
        )
    return int(grad_accum)


def _built(speedups: Any) -> bool:
    """Speed-up objects (the Trainer's, built from a recipe), rather than settings to build them from."""
    return isinstance(speedups, (list, tuple)) and all(isinstance(s, Speedup) for s in speedups)


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
