"""`accel.Engine`: a hand-written loop's way to accel's step machinery (accel.engine.core). A façade that holds a
core: the documented calls (docs/own-loop.md) are its public names, and everything else is private. Its parts: the
step (`setup`, `setup_dataloaders`, `autocast`, `backward`, `clip_gradients`, `no_sync`, `compile_step`, here), what
the loop keeps and writes (`save`, `load`, `log`, `summary`, `close`: accel.engine.loop_records) and the ranks
(`seed_everything`, `print`: accel.engine.ranks).

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
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import devices
from ..batches import leading_tensor, map_tensors
from ..errors import AccelError, say_uncaught_plainly
from ..measure.flops import few_samples
from ..measure.lint import SpeedLint
from ..optimizers.builders import muon_from
from ..speedups import Speedup, from_configs, refuse
from ..strategy import Strategy, choose
from ..strategy.world import World, init_process_group, restart_count, world_from_env
from . import process_observers, ranks
from . import state as engine_state
from .core import Core, Observer, checked_grad_accum
from .dataloaders import DeviceLoader, sharded
from .loop_records import LoopRecords, records_folder
from .loop_state import LoopState
from .schedule import ScheduleWatch
from .settings import engine_settings
from .wrappers import unwrap, wrap_module, wrap_optimizer

log = logging.getLogger("accel")


class _StepContext:
    """What `eng.autocast()` returns: enters the core's step contexts each time it is entered."""

    def __init__(self, engine: Engine):
        self.engine, self._stacks = engine, []

    def __enter__(self) -> None:
        engine, loop, core = self.engine, self.engine._loop, self.engine._core
        if core.whole_step is not None:
            engine._check_own_step()
        if not loop.forward_contexts and not core.anatomy.active:  # fp32, no speed-up context, no profile
            self._stacks.append(None)
            loop.autocast_depth = 0
            return
        engine._refuse_outer_autocast("eng.autocast() is inside an autocast the loop opened itself")
        stack = core.step_contexts()
        stack.enter_context(core.anatomy.phase("loss"))  # forward and loss: the profile's `loss` phase
        self._stacks.append(stack.__enter__())
        loop.autocast_depth = _autocast_nesting()

    def __exit__(self, *exc: Any) -> Any:
        self.engine._loop.autocast_depth = None
        stack = self._stacks.pop()
        return stack.__exit__(*exc) if stack is not None else None


# a micro-batch that does not step, under a strategy with nothing to skip (one process): no_sync is nothing
_NOTHING_TO_SKIP = nullcontext()


def _full_precision(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float() if tensor.dtype in (torch.bfloat16, torch.float16) else tensor


def _autocast_nesting() -> int:
    """How many torch.autocast contexts are open in this thread (torch counts them as each one enters)."""
    depth = torch.autocast_increment_nesting()
    torch.autocast_decrement_nesting()
    return depth - 1


def leading_counts(inputs: Any) -> tuple[int, int]:
    """A loop's batch is counted from its first tensor: its samples, and its tokens where it holds token ids. Read
    from the shape (a tuple), not `len()` and `dim()`: every training forward asks."""
    first = inputs[0] if type(inputs) is tuple and inputs else None
    shape = first.shape if isinstance(first, torch.Tensor) else ()
    if not shape:  # often the first tensor is the batch; else the first with a leading dimension
        first = leading_tensor(inputs)
        if first is None:
            return 0, 0
        shape = first.shape
    tokens = shape[0] * shape[1] if len(shape) == 2 and not first.is_floating_point() else 0
    return shape[0], tokens


class _LoopSteps(Observer):
    """The engine's own bookkeeping at its first optimizer step (the first of the core's observers): the speed lint
    starts and throughput is counted from there, and the ranks' first batches are compared."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def stepped(self) -> None:
        engine, loop, count = self.engine, self.engine._loop, self.engine._core.count
        engine._core.ignore(self)  # the first step only: the later ones cost the loop nothing here
        loop.lint = SpeedLint([], say=engine.world.is_main)  # the loaders are set up by now: the settings are final
        loop.lint.start(engine._core)
        ranks.check_drew_apart(
            engine.world, engine.device, loop.batch_sum
        )  # compilation and warm-up are in the first step: throughput starts after it
        loop.first_step, loop.samples_at_first, loop.tokens_at_first = time.perf_counter(), count.samples, count.tokens


class Engine:
    """One training step's machinery for one model and one optimizer, in a loop of the user's own; see the module
    docstring and docs/own-loop.md."""

    def __init__(
        self,
        speedups: Any = None,
        *,
        device: str | torch.device = "auto",
        strategy: Strategy | str | None = None,
        out: str | Path | None = None,
        resume: bool = False,
        grad_accum: int = 1,
        clip_grad_norm: float | None = None,
        strict: bool = False,
        world: World | None = None,
        optimizer: str | None = None,
    ):
        """`speedups`: a recipe's `speedups:` section (a mapping), a preset name (`"fast-cuda"`) or a YAML file
        (ACCEL_SET and ACCEL_SPEEDUPS override them: accel.engine.settings). `strategy`: "ddp" or "fsdp" under
        torchrun (ddp by default there). `out`: a folder for the run's records (metrics.jsonl from `log`,
        summary.json at `close`); one that holds a run's records already is refused, unless `resume` continues
        them (accel.engine.loop_records). `grad_accum`: micro-batches per optimizer step (a whole number, at least
        1); all but a step's last skip the gradient reduction, and where the engine runs the step itself
        (`compile_step`) it divides the loss by it; a loop's own `backward` never divides.
        `optimizer`: None (the loop's own, the default) or "muon": `setup` then steps Muon on the hidden matrices
        and AdamW on the rest, built from the loop's optimizer (accel.optimizers.builders.muon_from)."""
        # a group torchrun restarted (--max-restarts) re-runs the same command: it continues its own records
        resume = resume or (out is not None and restart_count() > 0)
        # refused before anything is set up (a process group, the device)
        grad_accum, out = checked_grad_accum(grad_accum), records_folder(out, resume)
        say_uncaught_plainly()
        given = strategy if isinstance(strategy, str) else None
        settings = engine_settings(speedups, str(device), given, optimizer=optimizer)
        world = world or world_from_env()
        device = init_process_group(world, devices.resolve_device(settings.device))
        self._core = Core(
            from_configs(settings.speedups),
            device=device,
            strategy=strategy if isinstance(strategy, Strategy) else choose(settings.strategy or "ddp", world, device),
            world=world,
            grad_accum=grad_accum,
            clip_grad_norm=clip_grad_norm,
            strict=strict,
            from_script=True,
            counter=leading_counts,
        )
        self._loop = LoopState()
        self._optimizer_setting = settings.optimizer  # "muon": built at setup
        self._core.observe(_LoopSteps(self))
        self._records = LoopRecords(self._core, self._loop, out, resume)
        # a bench trial's or a profile's agent, in a process `accel bench` or `accel profile` runs (accel/trial)
        for observer in process_observers.made_for(self._records, settings):
            self._core.observe(observer)
            self._records.out = None  # a trial's records are its own (the bench's record, the profile's report)

    @property
    def device(self) -> torch.device:
        return self._core.device

    @property
    def world(self) -> World:
        """The process's rank and world size."""
        return self._core.world

    @property
    def steps(self) -> int:
        """Optimizer steps taken (with a checkpoint's count after `load`)."""
        return self._core.steps

    # ---- set up ---------------------------------------------------------------------------------------
    def setup(self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None) -> Any:
        """The model on the device with the speed-ups and the strategy set up, and the optimizer stepping
        through them: `(model, optimizer)`, the user's own objects as far as the loop can tell."""
        core, loop = self._core, self._loop
        if loop.set_up:
            raise AccelError("this engine has set up a model already: one engine trains one model and optimizer")
        module, given = self._adopt(model)
        optimizer = unwrap(optimizer)
        if core.strategy.name == "fsdp":  # sharding replaces the parameters: the optimizer is built anew on them
            refuse(core.speedups, core.device, core.strategy, core.strategy.precision.name, True)  # before sharding
            before = dict(module.to(core.device).named_parameters())
            module = core.strategy.prepare(module)
            optimizer = rebuilt(optimizer, before, dict(module.named_parameters()))
        if self._optimizer_setting == "muon":  # asked for by a setting (tune --objective time), never by default
            optimizer = muon_from(module.to(core.device), optimizer)
        if scheduler is not None:  # the loop steps its own scheduler: the engine watches it, and steps none
            core.scheduled = True
            core.observe(ScheduleWatch(scheduler))
        core.attach(module, optimizer)
        if given is not None:  # the loop's own compiled model is what forward calls
            core.model = given
        core.setup_speedups()
        core.tell("set_up")
        loop.set_up, loop.started = True, time.perf_counter()
        # whether a forward needs the step contexts (a precision, a speed-up's context): decided once, not per call
        loop.low_precision, loop.distributed = core.strategy.precision.name != "fp32", core.world.distributed
        loop.optimizer_step = core.strategy.loop_step(core.optimizer)
        loop.backward, loop.syncs = core.strategy.loop_backward(), core.strategy.syncs
        loop.forward_contexts = loop.low_precision or any(
            type(s).step_context is not Speedup.step_context for s in core.speedups
        )
        return wrap_module(core.module, core, self._forward), wrap_optimizer(core.optimizer, core, self._optimizer_step)

    def _adopt(self, model: nn.Module) -> tuple[nn.Module, nn.Module | None]:
        """(the plain module, the loop's own compiled model to call, if any), refusing what would be done twice."""
        compiling = next((s.name for s in self._core.speedups if s.compiles_model), None)
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

    def setup_dataloaders(self, *loaders: Any) -> Any:
        """Each loader with its batches on the device and, under several processes, one shard per rank: the
        first is the training loader (its batches are counted), the others are evaluation loaders."""
        core = self._core
        wrapped = [DeviceLoader(sharded(loader, core.world), core, train=i == 0) for i, loader in enumerate(loaders)]
        core.train_loader = wrapped[0].loader  # the conflict rule's `drop_last`
        if self._loop.set_up:  # loaders after `setup`: what the rule says of them is said now, before any step
            try:
                core.refuse_speedups()
            except AccelError:
                core.teardown()
                raise
        return wrapped[0] if len(wrapped) == 1 else tuple(wrapped)

    # ---- one step -------------------------------------------------------------------------------------
    def _forward(self, *args: Any, **kwargs: Any) -> Any:
        """A call of the model the loop holds: through what the speed-ups made of it. Outside `eng.autocast()`
        the call runs under the precision and the speed-ups' step contexts itself, and low-precision floating
        outputs come back in fp32, so a loss computed after it is computed in fp32 (inputs are never cast)."""
        loop, core = self._loop, self._core
        if loop.in_step:  # inside compile_step's step: the core runs the contexts and counts itself
            return core.model(*args, **kwargs)
        if core._prepares:  # the memory format the weights are in (channels_last): never the dtype
            args = map_tensors(core._prepare_images, args)
        if torch.is_grad_enabled() and core.module.training:
            # a training micro-batch: under `grad_accum`, every one but a step's last runs forward and backward in
            # the strategy's no_sync (opened here, closed after its backward): no gradient reduction until the last
            if loop.unsynced is not None:  # a forward without backward (a probe): its no_sync ends here
                loop.unsynced.__exit__(None, None, None)
                loop.unsynced = None
            if not core.micro_batch() and not loop.in_no_sync:
                loop.unsynced = core.strategy.no_sync(core.module) if loop.syncs else _NOTHING_TO_SKIP
                loop.unsynced.__enter__()
            loop.forward_synced = not loop.in_no_sync and loop.unsynced is None
            inputs = args or tuple(kwargs.values())
            core.count_batch(inputs)  # the batch's first tensor: a loop's forward takes it first
            if loop.distributed and loop.batch_sum is None:
                loop.batch_sum = ranks.first_batch_sum(inputs)
            if loop.flops_inputs is None and not loop.utilisation.counted:
                loop.flops_inputs = few_samples(args, kwargs)
        if loop.autocast_depth is not None:
            if loop.low_precision:  # an autocast of the loop's own inside eng.autocast() would run it twice
                self._refuse_inner_autocast()
            return core.model(*args, **kwargs)
        if not loop.forward_contexts:
            return core.model(*args, **kwargs)
        self._refuse_outer_autocast("the model is called inside an autocast the loop opened itself")
        with core.step_contexts():
            outputs = core.model(*args, **kwargs)
        return map_tensors(_full_precision, outputs) if core.strategy.precision.name != "fp32" else outputs

    def _refuse_inner_autocast(self) -> None:
        precision = self._core.strategy.precision.name
        if _autocast_nesting() > self._loop.autocast_depth:
            raise AccelError(
                f"the loop opens an autocast of its own inside eng.autocast(), which already runs the forward in "
                f"{precision}: remove the loop's torch.autocast (or drop "
                f"`speedups.{self._core.precision_speedup()}`)"
            )

    def _refuse_outer_autocast(self, what: str) -> None:
        precision, given = self._core.strategy.precision.name, self._core.precision_speedup()
        if precision != "fp32" and _autocast_nesting():
            raise AccelError(
                f"{what}, while accel's {given} runs the forward in {precision} already: replace the loop's "
                f"torch.autocast by eng.autocast() (or drop `speedups.{given}`)"
            )

    def autocast(self) -> AbstractContextManager:
        """Around forward and loss: the precision's autocast and every speed-up's step context. Reusable, as
        nanoGPT's `ctx`: `ctx = eng.autocast()` once, then `with ctx:` in every step."""
        return _StepContext(self)

    def backward(self, loss: torch.Tensor) -> None:
        """The strategy's backward, with the precision's loss scaling (fp16). The loss is used as given: under
        gradient accumulation the loop divides it by its steps itself, as it would without accel. After a step's
        last micro-batch the gradients are unscaled (fp16), so whatever clips them next sees their true values."""
        loop, core = self._loop, self._core
        if core.whole_step is not None:
            self._check_own_step()
        precision = core.strategy.precision
        if precision.unscaled:
            raise AccelError(
                "backward after this step's gradients were unscaled (fp16): the loop accumulates more "
                f"micro-batches per step than the engine's grad_accum={core.grad_accum}; give the Engine the loop's "
                "own number"
            )
        if loop.forward_synced is not None and loop.unsynced is None and loop.forward_synced == loop.in_no_sync:
            where = "inside" if loop.in_no_sync else "outside"
            raise AccelError(
                f"backward runs {where} eng.no_sync(model) but its forward did not: no_sync must cover the "
                "forward as well as the backward (DDP prepares the gradient reduction in the forward)"
            )
        loop.forward_synced = None
        for listener in core.told["loss"]:  # core.tell, inline: often no one listens, and then this costs no call
            listener(loss, 1)  # the loop's backward gets its share of the step already
        try:
            if core.anatomy.active:  # a profile's window: the phase is timed
                with core.anatomy.phase("backward"):
                    loop.backward(loss)
            else:  # every other step: not even a context to enter (a launch-bound GPU step feels each call)
                loop.backward(loss)
        finally:
            if loop.unsynced is not None:
                loop.unsynced.__exit__(None, None, None)
                loop.unsynced = None
        if precision.scales and not loop.in_no_sync and core.count.micro_batches % core.grad_accum == 0:
            precision.unscale(core.optimizer)

    def clip_gradients(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Clip the gradients' norm to `max_norm`, after unscaling them (fp16); the norm before clipping."""
        self._core.strategy.precision.unscale(unwrap(optimizer))
        return nn.utils.clip_grad_norm_(self._core.module.parameters(), max_norm, norm_type)

    def _optimizer_step(self) -> None:
        """`optimizer.step()` in the loop: through the strategy and precision (clipped already, if at all)."""
        core = self._core
        if core.count.micro_batches % core.grad_accum:
            raise AccelError(
                f"optimizer.step() after {core.count.micro_batches} micro-batches, but the engine was given "
                f"grad_accum={core.grad_accum}: the last micro-batch's gradients were not reduced across processes. "
                "Give the Engine the loop's own number of micro-batches per step"
            )
        if core.anatomy.active:
            with core.anatomy.phase("optimizer"):
                self._loop.optimizer_step()
        else:  # as in backward
            self._loop.optimizer_step()
        if core.speedups:  # a plain loop's step makes no call for none
            core.after_batch()
        core.count_step()

    @contextmanager
    def no_sync(self, model: nn.Module) -> Iterator[None]:
        """Around a micro-batch that does not step, forward and backward both: no gradient reduction."""
        self._loop.in_no_sync = True
        try:
            with self._core.strategy.no_sync(self._core.module):
                yield
        finally:
            self._loop.in_no_sync = False

    def compile_step(self, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        """`step = eng.compile_step(fn)`: `fn(*batch) -> loss` is the forward and loss; `step(*batch)` runs the
        whole training step (forward and loss under autocast, backward, clipping and the optimizer step, the
        gradients cleared), as one function the whole-step speed-ups can compile or capture. Returns the loss."""
        core, loop = self._core, self._loop
        core.loss = lambda batch: fn(*batch)
        loop.step_function = True

        def step(*batch: Any) -> torch.Tensor:
            loop.in_step = True
            try:
                return core.run_step(batch).loss
            finally:
                loop.in_step = False

        return step

    def _check_own_step(self) -> None:
        whole = self._core.whole_step
        if whole is not None and not self._loop.step_function:
            raise AccelError(
                f"speed-up `{whole}` replaces the whole training step, which a loop's own forward and backward "
                "cannot give it: write the forward and loss as one function and let the engine run the step, "
                "`step = eng.compile_step(fn)` then `loss = step(x, y)` (no backward or optimizer.step() of your "
                "own), or disable the speed-up"
            )

    def _say(self, key: str, message: str) -> None:
        if key not in self._loop.said:
            self._loop.said.add(key)
            log.info(message)

    # ---- what it keeps and writes (accel.engine.state, accel.engine.loop_records), and the ranks ----------
    def save(self, path: str | Path, state: dict[str, Any]) -> None:
        """Write `state` (modules, optimizers, schedulers, loaders, plain values) and the engine's own state
        atomically (rank 0; every rank waits)."""
        engine_state.save(self._core, path, state)

    def load(self, path: str | Path, state: dict[str, Any]) -> dict[str, Any]:
        """Load what `save` wrote into the objects in `state`, in place; plain values are put back in `state`."""
        loaded = engine_state.load(self._core, path, state)
        self._loop.resumed_at = self._core.steps  # where a resumed run's records continue
        return loaded

    def log(self, metrics: dict[str, Any]) -> None:
        """Record scalars (a `val_loss`, anything): with an `out`, in its metrics.jsonl and TensorBoard (tb/)."""
        self._records.log(metrics)

    def summary(self) -> dict[str, Any]:
        """What the run did: steps, throughput after the first step, data wait, speed-ups, the last metrics."""
        return self._records.summary().model_dump(exclude_unset=True)

    def close(self) -> dict[str, Any]:
        """Tear the speed-ups down (every global flag restored); with `out`, write summary.json there."""
        return self._records.close().model_dump(exclude_unset=True)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def seed_everything(self, seed: int, per_rank: bool = True) -> int:
        """Seed Python's, NumPy's and torch's random streams; with `per_rank` (the default) rank r gets a stream
        of its own (accel.runs.rng.rank_seed: rank 0 keeps `seed`), as accel's Trainer seeds its ranks, so batches
        a loop samples itself differ across ranks. DDP still starts every rank from rank 0's weights. The seed."""
        return ranks.seed_everything(self.world, seed, per_rank)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """`print` on rank 0 only: a loop's progress once, not once per process."""
        ranks.print_once(self.world, *args, **kwargs)


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
