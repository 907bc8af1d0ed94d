"""The engine's methods for a hand-written loop's step: `setup`, `setup_dataloaders`, `autocast`, `backward`,
`clip_gradients`, `no_sync` and `compile_step` (what the loop keeps and writes: accel.engine.loop_records).

Additive, never twice: what the loop already does (a compiled or DDP-wrapped model, an autocast of its own, a
GradScaler of its own) is said, or refused where accel would do it again. The mistakes other own-loop APIs made are
impossible here: the loss is never divided behind the loop's back, `no_sync` must cover the forward as well as the
backward, EMA averages only real optimizer steps (a hook on the optimizer's step), a loader already sharded per rank
is not sharded again, and inputs are never cast behind autocast's back.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..batches import leading_size, leading_tensor, map_tensors
from ..callbacks.tensorboard import TensorBoard
from ..errors import AccelError
from ..measure.flops import COUNT_SAMPLES, Utilisation, first_samples
from ..measure.lint import SpeedLint
from ..optimizers.builders import muon_from
from ..speedups import Speedup, refuse
from .dataloaders import DeviceLoader, sharded
from .schedule import ScheduleWatch
from .wrappers import unwrap, wrap_module, wrap_optimizer

if TYPE_CHECKING:
    from .core import Engine

log = logging.getLogger("accel")


class _StepContext:
    """What `eng.autocast()` returns: enters the engine's step contexts each time it is entered."""

    def __init__(self, engine: Engine):
        self.engine, self._stacks = engine, []

    def __enter__(self) -> None:
        engine, loop = self.engine, self.engine._loop
        engine._check_own_step()
        if not loop.forward_contexts and not engine.anatomy.active:  # fp32, no speed-up context, no profile
            self._stacks.append(None)
            loop.autocast_depth = 0
            return
        engine._refuse_outer_autocast("eng.autocast() is inside an autocast the loop opened itself")
        stack = engine.step_contexts()
        stack.enter_context(engine.anatomy.phase("loss"))  # forward and loss: the profile's `loss` phase
        self._stacks.append(stack.__enter__())
        loop.autocast_depth = _autocast_nesting()

    def __exit__(self, *exc: Any) -> Any:
        self.engine._loop.autocast_depth = None
        stack = self._stacks.pop()
        return stack.__exit__(*exc) if stack is not None else None


def _full_precision(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float() if tensor.dtype in (torch.bfloat16, torch.float16) else tensor


@dataclass
class LoopState:
    """What the engine knows of the loop around it, and what it counted."""

    set_up: bool = False
    step_function: bool = False  # the loop gave its step as one function (compile_step)
    autocast_depth: int | None = None  # torch's autocast nesting inside eng.autocast(), None outside it
    in_no_sync: bool = False
    forward_synced: bool | None = None  # whether the last training forward ran outside no_sync
    said: set[str] = field(default_factory=set)  # notes logged once
    utilisation: Utilisation = field(default_factory=Utilisation)  # FLOPs of a sample, counted when first asked
    flops_inputs: Any = None  # a few samples of the first training forward's inputs, until their FLOPs are counted
    lint: SpeedLint | None = None
    tensorboard: TensorBoard | None = None  # with `out`, from the first `log`
    micro_batches: int = 0  # training forwards (or compile_step calls) since the last optimizer step
    unsynced: Any = None  # the strategy's no_sync, open from a non-final micro-batch's forward to its backward
    in_step: bool = False  # inside a compile_step step
    forward_contexts: bool = False  # a forward outside eng.autocast() enters the step contexts (set by setup)
    whole_step: str | None = None  # the speed-up that replaces the whole step, if any (the engine's, fixed)
    schedule: ScheduleWatch | None = None  # the loop's own scheduler, which the loop steps (accel.engine.schedule)
    samples: int = 0
    tokens: int = 0
    data_s: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    first_step: float | None = None  # when the first optimizer step ended: throughput is counted from there
    samples_at_first: int = 0
    tokens_at_first: int = 0
    batch_sum: Any = None  # the first training batch's checksum, under several processes (accel.engine.ranks)


def _autocast_nesting() -> int:
    """How many torch.autocast contexts are open in this thread (torch counts them as each one enters)."""
    depth = torch.autocast_increment_nesting()
    torch.autocast_decrement_nesting()
    return depth - 1


def _few_samples(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The first COUNT_SAMPLES samples of a forward's inputs, copied (the loop may refill its own tensors)."""
    samples = leading_size((args, kwargs))
    few = first_samples((args, kwargs), samples, min(samples, COUNT_SAMPLES))
    return map_tensors(lambda t: t.detach().clone(), few)


class OwnLoop:
    """Mixed into accel.engine.core.Engine; see the module docstring."""

    # ---- set up ---------------------------------------------------------------------------------------
    def setup(self: Engine, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None) -> Any:
        """The model on the device with the speed-ups and the strategy set up, and the optimizer stepping
        through them: `(model, optimizer)`, the user's own objects as far as the loop can tell."""
        if self._loop.set_up:
            raise AccelError("this engine has set up a model already: one engine trains one model and optimizer")
        module, given = self._adopt(model)
        optimizer = unwrap(optimizer)
        if self.strategy.name == "fsdp":  # sharding replaces the parameters: the optimizer is built anew on them
            refuse(self.speedups, self.device, self.strategy, self.strategy.precision.name, True)  # before sharding
            before = dict(module.to(self.device).named_parameters())
            module = self.strategy.prepare(module)
            optimizer = rebuilt(optimizer, before, dict(module.named_parameters()))
        if self.optimizer_setting == "muon":  # asked for by a setting (tune --objective time), never by default
            optimizer = muon_from(module.to(self.device), optimizer)
        self._loop.schedule = ScheduleWatch(scheduler) if scheduler is not None else None
        self.attach(module, optimizer)  # the loop steps its own scheduler: the engine is given none to step
        if given is not None:  # the loop's own compiled model is what forward calls
            self.model = given
        self.setup_speedups()
        if self._trial is not None:  # `accel bench` or `accel profile` runs the script (accel.engine.script_trial)
            self._trial.set_up(self)
        self._loop.set_up, self._loop.started = True, time.perf_counter()
        # whether a forward needs the step contexts (a precision, a speed-up's context): decided once, not per call
        self._loop.forward_contexts = self.strategy.precision.name != "fp32" or any(
            type(s).step_context is not Speedup.step_context for s in self.speedups
        )
        return wrap_module(self.module, self), wrap_optimizer(self.optimizer, self)

    def _adopt(self: Engine, model: nn.Module) -> tuple[nn.Module, nn.Module | None]:
        """(the plain module, the loop's own compiled model to call, if any), refusing what would be done twice."""
        compiling = next((s.name for s in self.speedups if s.compiles_model), None)
        if isinstance(model, nn.parallel.DistributedDataParallel):
            raise AccelError(
                "the model is wrapped in DistributedDataParallel already, and the engine wraps it itself under "
                "torchrun: pass the plain model (eng.setup wraps it once)"
            )
        if type(model).__name__ != "OptimizedModule" or not hasattr(model, "_orig_mod"):  # not torch.compile's
            return model, None
        if compiling is not None:
            raise AccelError(
                f"the model is compiled already (torch.compile), and `speedups.{compiling}` would compile it again: "
                f"remove the loop's torch.compile, or disable the speed-up (`speedups.{compiling}.enabled=false`)"
            )
        if self.world.distributed:
            raise AccelError(
                "the model is compiled already and the engine wraps it in DDP: pass the plain model and enable "
                "`speedups.compile`, so that compilation sees the DDP-wrapped model"
            )
        self._say("compiled", "the loop compiles the model itself (torch.compile); accel compiles nothing")
        return model._orig_mod, model

    def setup_dataloaders(self: Engine, *loaders: Any) -> Any:
        """Each loader with its batches on the device and, under several processes, one shard per rank: the
        first is the training loader (its batches are counted), the others are evaluation loaders."""
        wrapped = [DeviceLoader(sharded(loader, self), self, train=i == 0) for i, loader in enumerate(loaders)]
        self.train_loader = wrapped[0].loader  # the conflict rule's `drop_last`
        if self._loop.set_up:  # loaders after `setup`: what the rule says of them is said now, before any step
            try:
                self.refuse_speedups()
            except AccelError:
                self.teardown()
                raise
        return wrapped[0] if len(wrapped) == 1 else tuple(wrapped)

    # ---- one step -------------------------------------------------------------------------------------
    def forward(self: Engine, *args: Any, **kwargs: Any) -> Any:
        """A call of the model the loop holds: through what the speed-ups made of it. Outside `eng.autocast()`
        the call runs under the precision and the speed-ups' step contexts itself, and low-precision floating
        outputs come back in fp32, so a loss computed after it is computed in fp32 (inputs are never cast)."""
        loop = self._loop
        if loop.in_step:  # inside compile_step's step: the engine runs the contexts and counts itself
            return self.model(*args, **kwargs)
        if self._prepares:  # the memory format the weights are in (channels_last): never the dtype
            args = map_tensors(self._prepare_images, args)
        if torch.is_grad_enabled() and self.module.training:
            self._micro_batch()
            self._count(args or tuple(kwargs.values()))
            if loop.flops_inputs is None and not loop.utilisation.counted:
                loop.flops_inputs = _few_samples(args, kwargs)
        if loop.autocast_depth is not None:
            self._refuse_inner_autocast()
            return self.model(*args, **kwargs)
        if not loop.forward_contexts:
            return self.model(*args, **kwargs)
        self._refuse_outer_autocast("the model is called inside an autocast the loop opened itself")
        with self.step_contexts():
            outputs = self.model(*args, **kwargs)
        return map_tensors(_full_precision, outputs) if self.strategy.precision.name != "fp32" else outputs

    def _micro_batch(self: Engine) -> None:
        """Under `grad_accum`, every micro-batch but a step's last runs forward and backward in the strategy's
        no_sync (opened here, closed after its backward): no gradient reduction until the last."""
        loop = self._loop
        if loop.unsynced is not None:  # a forward without backward (a probe): its no_sync ends here
            loop.unsynced.__exit__(None, None, None)
            loop.unsynced = None
        loop.micro_batches += 1
        if self.grad_accum > 1 and not loop.in_no_sync and loop.micro_batches % self.grad_accum:
            loop.unsynced = self.strategy.no_sync(self.module)
            loop.unsynced.__enter__()
        loop.forward_synced = not loop.in_no_sync and loop.unsynced is None

    def _count(self: Engine, inputs: tuple) -> None:
        leading = leading_tensor(inputs)
        if leading is not None:
            self._first_batch(leading)
            self._loop.samples += len(leading)
            if not leading.is_floating_point() and leading.dim() == 2:  # token ids
                self._loop.tokens += leading.numel()

    def _refuse_inner_autocast(self: Engine) -> None:
        if self.strategy.precision.name != "fp32" and _autocast_nesting() > self._loop.autocast_depth:
            raise AccelError(
                f"the loop opens an autocast of its own inside eng.autocast(), which already runs the forward in "
                f"{self.strategy.precision.name}: remove the loop's torch.autocast (or drop "
                f"`speedups.{self.precision_speedup()}`)"
            )

    def _refuse_outer_autocast(self: Engine, what: str) -> None:
        if self.strategy.precision.name != "fp32" and _autocast_nesting():
            raise AccelError(
                f"{what}, while accel's {self.precision_speedup()} runs the forward in {self.strategy.precision.name} "
                f"already: replace the loop's torch.autocast by eng.autocast() (or drop "
                f"`speedups.{self.precision_speedup()}`)"
            )

    def autocast(self: Engine) -> AbstractContextManager:
        """Around forward and loss: the precision's autocast and every speed-up's step context. Reusable, as
        nanoGPT's `ctx`: `ctx = eng.autocast()` once, then `with ctx:` in every step."""
        return _StepContext(self)

    def backward(self: Engine, loss: torch.Tensor) -> None:
        """The strategy's backward, with the precision's loss scaling (fp16). The loss is used as given: under
        gradient accumulation the loop divides it by its steps itself, as it would without accel. After a step's
        last micro-batch the gradients are unscaled (fp16), so whatever clips them next sees their true values."""
        self._check_own_step()
        loop, precision = self._loop, self.strategy.precision
        if precision.unscaled:
            raise AccelError(
                "backward after this step's gradients were unscaled (fp16): the loop accumulates more "
                f"micro-batches per step than the engine's grad_accum={self.grad_accum}; give the Engine the loop's "
                "own number"
            )
        if loop.forward_synced is not None and loop.unsynced is None and loop.forward_synced == loop.in_no_sync:
            where = "inside" if loop.in_no_sync else "outside"
            raise AccelError(
                f"backward runs {where} eng.no_sync(model) but its forward did not: no_sync must cover the "
                "forward as well as the backward (DDP prepares the gradient reduction in the forward)"
            )
        loop.forward_synced = None
        if self._trial is not None:
            self._trial.loss(self, loss)
        try:
            with self.anatomy.phase("backward"):
                self.strategy.backward(loss)
        finally:
            if loop.unsynced is not None:
                loop.unsynced.__exit__(None, None, None)
                loop.unsynced = None
        if not loop.in_no_sync and loop.micro_batches % self.grad_accum == 0:
            precision.unscale(self.optimizer)

    def clip_gradients(
        self: Engine, model: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Clip the gradients' norm to `max_norm`, after unscaling them (fp16); the norm before clipping."""
        self.strategy.precision.unscale(unwrap(optimizer))
        return nn.utils.clip_grad_norm_(self.module.parameters(), max_norm, norm_type)

    def optimizer_step_from_loop(self: Engine) -> None:
        """`optimizer.step()` in the loop: through the strategy and precision (clipped already, if at all)."""
        loop = self._loop
        if loop.micro_batches % self.grad_accum:
            raise AccelError(
                f"optimizer.step() after {loop.micro_batches} micro-batches, but the engine was given grad_accum="
                f"{self.grad_accum}: the last micro-batch's gradients were not reduced across processes. Give the "
                "Engine the loop's own number of micro-batches per step"
            )
        loop.micro_batches = 0
        with self.anatomy.phase("optimizer"):
            self.strategy.optimizer_step(self.optimizer, _no_clip)
        self.steps += 1
        self.after_batch()
        self._stepped()

    def _stepped(self: Engine) -> None:
        loop = self._loop
        if loop.lint is None:  # after the first step the loaders are set up too: the settings are final
            loop.lint = SpeedLint([], say=self.world.is_main)
            loop.lint.start(self)
        if loop.first_step is None:  # compilation and warm-up are in the first step: throughput starts after it
            self._check_ranks_drew_apart()
            loop.first_step, loop.samples_at_first, loop.tokens_at_first = (
                time.perf_counter(),
                loop.samples,
                loop.tokens,
            )
        if loop.schedule is not None:
            loop.schedule.stepped()
        if self._trial is not None:  # `accel bench` times this step (accel.engine.script_trial)
            self._trial.stepped(self)

    @contextmanager
    def no_sync(self: Engine, model: nn.Module) -> Iterator[None]:
        """Around a micro-batch that does not step, forward and backward both: no gradient reduction."""
        self._loop.in_no_sync = True
        try:
            with self.strategy.no_sync(self.module):
                yield
        finally:
            self._loop.in_no_sync = False

    def compile_step(self: Engine, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        """`step = eng.compile_step(fn)`: `fn(*batch) -> loss` is the forward and loss; `step(*batch)` runs the
        whole training step (forward and loss under autocast, backward, clipping and the optimizer step, the
        gradients cleared), as one function the whole-step speed-ups can compile or capture. Returns the loss."""
        self.loss = lambda batch: fn(*batch)
        self._loop.step_function = True
        loop = self._loop

        def step(*batch: Any) -> torch.Tensor:
            loop.micro_batches += 1
            boundary = loop.micro_batches % self.grad_accum == 0
            loop.in_step = True
            try:
                loss = self.step_batch(batch, boundary)
            finally:
                loop.in_step = False
            self._count(batch)
            if boundary:
                loop.micro_batches = 0
            self.after_batch()
            if self._trial is not None:
                self._trial.loss(self, loss, self.grad_accum)
            if boundary:
                self._stepped()
            return loss.detach()

        return step

    def _check_own_step(self: Engine) -> None:
        loop, whole = self._loop, self._loop.whole_step
        if whole is not None and not loop.step_function:
            raise AccelError(
                f"speed-up `{whole}` replaces the whole training step, which a loop's own forward and backward "
                "cannot give it: write the forward and loss as one function and let the engine run the step, "
                "`step = eng.compile_step(fn)` then `loss = step(x, y)` (no backward or optimizer.step() of your "
                "own), or disable the speed-up"
            )

    def _say(self: Engine, key: str, message: str) -> None:
        if key not in self._loop.said:
            self._loop.said.add(key)
            log.info(message)


def rebuilt(optimizer: torch.optim.Optimizer, before: dict, after: dict) -> torch.optim.Optimizer:
    """The optimizer, built again with the same class, groups and settings over the sharded parameters."""
    if optimizer.state:
        raise AccelError(
            "strategy fsdp shards the model's parameters, so the optimizer is built again over the shards; this "
            "one has state already: call eng.setup before training or loading the optimizer"
        )
    name = {id(p): n for n, p in before.items()}
    groups = [{**group, "params": [after[name[id(p)]] for p in group["params"]]} for group in optimizer.param_groups]
    accepted = inspect.signature(type(optimizer).__init__).parameters  # defaults hold more (AdamW's own flag)
    try:
        return type(optimizer)(groups, **{k: v for k, v in optimizer.defaults.items() if k in accepted})
    except TypeError as err:
        raise AccelError(
            f"strategy fsdp: {type(optimizer).__name__} could not be built again over the sharded parameters "
            f"({err}); use strategy ddp for it"
        ) from None


def _no_clip() -> None:
    """The loop clips itself (eng.clip_gradients), before optimizer.step()."""
