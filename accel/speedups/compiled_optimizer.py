"""`compiled_optimizer`: the optimizer step under torch.compile, its learning rates handed in as tensors.

Eager, `optimizer.step()` launches a few kernels per parameter (for_loop) or per group of tensors (foreach);
compiled, inductor fuses the whole update into a few generated kernels. Two choices keep it compiled once:
- the learning rate. A Python float is a constant to dynamo, so each new value of a schedule would recompile the
  step. For the compiled call only, each group's `lr` is a 0-dim float64 tensor (a graph input) filled from the
  float: the scheduler, the logged lr and checkpoints keep the float, so a schedule computes exactly as eager.
- the call site. Every caller steps through `optimizer.step()` (the strategy, the GradScaler after its inf check,
  XLA's optimizer_step), so the compiled step is installed there, on the instance, for the run (torch's
  LRScheduler wraps it the same way) and removed at teardown. Any optimizer class compiles, composite ones too.
The scheduler's own update stays eager: it is scalar host arithmetic (one `fill_` per group), and compiled it
would guard on its step counter.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from pydantic import Field, field_validator

from .base import Context, Phase, Speedup, SpeedupConfig, registered
from .compile import check_backend, unavailable
from .compile_workers import release_compile_workers

if TYPE_CHECKING:
    from ..strategy.slots import Slots

log = logging.getLogger("accel")


@contextmanager
def tensor_lrs(groups: list[dict[str, Any]], tensors: list[torch.Tensor], fill: bool = True) -> Iterator[None]:
    """Each group's float `lr` replaced by its tensor in `tensors` (filled with the float unless `fill` is false:
    a CUDA graph capture must not record the fill) for the duration, then restored. The same tensor objects every
    call: dynamo sees one input of one shape, whatever the value."""
    floats = [group["lr"] for group in groups]
    for group, tensor in zip(groups, tensors, strict=True):
        if not isinstance(group["lr"], torch.Tensor):  # an optimizer built with tensor lrs keeps its own
            if fill:
                tensor.fill_(group["lr"])
            group["lr"] = tensor
    try:
        yield
    finally:
        for group, lr in zip(groups, floats, strict=True):
            group["lr"] = lr


class CompiledStep:
    """`optimizer.step` compiled with `backend`, called with tensor learning rates. Counts the graphs the backend
    compiled and their wall time. torch breaks the graph on purpose around an optimizer's step (the no_grad switch
    in torch/optim/optimizer.py `_use_grad`) and the first step builds the optimizer's state, so the first two
    calls compile a few graphs; a graph compiled after them (`late_graphs`) is a recompilation paid again."""

    STEADY_FROM_CALL = 3

    def __init__(self, optimizer: torch.optim.Optimizer, backend: str):
        self.optimizer, self.eager = optimizer, optimizer.step  # the LRScheduler's wrapper where there is one
        self.graphs, self.late_graphs, self.calls, self.compile_s = 0, 0, 0, 0.0
        self._lrs: list[torch.Tensor] = []
        self._compiled = torch.compile(self.eager, backend=self._counting(backend))

    def _counting(self, backend: str) -> Callable:
        import torch._dynamo

        compiler = torch._dynamo.lookup_backend(backend)

        def count(graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
            self.graphs += 1
            if self.calls >= self.STEADY_FROM_CALL:
                self.late_graphs += 1
            return compiler(graph, example_inputs)

        return count

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        groups = self.optimizer.param_groups
        if len(self._lrs) != len(groups):  # add_param_group: one more input, one recompilation
            self._lrs = [torch.zeros((), dtype=torch.float64) for _ in groups]
        graphs, start = self.graphs, time.perf_counter()
        self.calls += 1
        with tensor_lrs(groups, self._lrs):
            result = self._compiled(*args, **kwargs)
        if self.graphs != graphs:  # tracing, code generation and this one step
            self.compile_s += time.perf_counter() - start
        return result

    def install(self) -> None:
        @functools.wraps(self.eager)  # keeps `_wrapped_by_lr_sched`: the scheduler still sees the step it wrapped
        def step(*args: Any, **kwargs: Any) -> Any:
            return self(*args, **kwargs)

        self.optimizer.step = step

    def uninstall(self) -> None:
        self.optimizer.step = self.eager
        if getattr(self.eager, "__self__", None) is self.optimizer:  # the class's own method: no instance copy
            del self.optimizer.step


@registered("compiled_optimizer")
class CompiledOptimizer(Speedup):
    """torch.compile the optimizer step (any torch.optim optimizer), its learning rates as tensors: no schedule
    recompiles it."""

    phase = Phase.KERNELS  # it chooses the optimizer's kernels: generated ones instead of torch's hand-written ones
    # no tune candidate: on CPUs it measured 0.93x (lm-bytes) and no effect (ResNet-18), and compiles 30-140 s
    # (docs/benchmarks.md); a GPU measurement decides whether CUDA gets one

    class Config(SpeedupConfig):
        backend: str = Field(
            "inductor",
            description="dynamo backend: `inductor` generates fused kernels for the update; `aot_eager` and "
            "`eager` only trace (quick checks that the step compiles)",
        )

        @field_validator("backend")
        @classmethod
        def _known_backend(cls, value: str) -> str:
            return check_backend(value)

    def __init__(self, cfg: Config | None = None):
        super().__init__(cfg)
        self._step: CompiledStep | None = None
        self._final: dict[str, Any] = {}
        self._warned = False
        self._graphs_seen = 0
        self._environ: dict[str, str] = {}

    def conflict(self, context: Context) -> str | None:
        if context.strategy == "fsdp":
            return "compiling a step over sharded (DTensor) parameters is not supported by accel; use `strategy: ddp`"
        return unavailable(context.device, self.cfg.backend) or self._optim_conflict(context)

    def _optim_conflict(self, context: Context) -> str | None:
        foreach = next((o for o in context.others if o.optimizer_impl() == "foreach"), None)
        if foreach is not None:
            # Adam's foreach kernels take a tensor lr only with capturable=True (torch/optim/adam.py _init_group)
            return (
                "torch's foreach kernels refuse a tensor learning rate (unless capturable), and the compiled step "
                f"fuses the update itself; drop `speedups.{foreach.name}` or let it choose (`impl: auto`)"
            )
        return None

    def setup(self, engine: "Slots") -> None:
        self._environ = dict(os.environ)  # tracing the step imports inductor, which sets variables (its cache dir)
        self._step, self._final, self._warned = CompiledStep(engine.optimizer, self.cfg.backend), {}, False
        self._graphs_seen = 0
        self._step.install()

    def after_batch(self) -> None:
        if self._step is not None and self._step.graphs != self._graphs_seen and self.cfg.backend == "inductor":
            # its compilation is over: stop inductor's compile workers now, not after torch's idle 60 s
            self._graphs_seen = self._step.graphs
            release_compile_workers()

    def metrics(self) -> dict[str, Any]:
        if self._step is None:
            return dict(self._final)
        step = self._step
        return {"graphs": step.graphs, "late_graphs": step.late_graphs, "compile_s": step.compile_s}

    def end_epoch(self) -> None:
        late = self.metrics().get("late_graphs", 0)
        if late and not self._warned:
            self._warned = True
            log.warning(
                "compiled_optimizer: the optimizer step was compiled again %d time(s) after its first two steps; "
                "each recompilation costs a compile (a hyperparameter other than lr that changes every step, "
                "or a param group added, does this). TORCH_LOGS=recompiles says why",
                late,
            )

    def teardown(self) -> None:
        import torch._dynamo

        if self._step is None:
            return
        self.end_epoch()
        self._final = self.metrics()
        self._step.uninstall()
        self._step = None
        torch._dynamo.reset()  # drop the compiled step and its guards (they hold the optimizer)
        for key in set(os.environ) - set(self._environ):
            del os.environ[key]
        os.environ.update(self._environ)
