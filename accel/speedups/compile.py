"""`compile`: torch.compile the model (or forward + loss), and report what compiling cost and where it broke.

Dynamo keeps its counters process-wide, so the speed-up snapshots them at setup and reports the difference:
the numbers in a run's metrics are that run's own, even when an earlier run in the same process compiled too.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field, field_validator, model_validator

from ..errors import did_you_mean
from ..models.blocks import repeated_blocks
from .base import Candidate, Context, Phase, Speedup, SpeedupConfig, one_program, registered
from .compile_workers import release_compile_workers

if TYPE_CHECKING:
    from ..strategy.slots import Slots

log = logging.getLogger("accel")

Mode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


def known_backends() -> list[str]:
    """Every registered dynamo backend, the debugging ones (eager, aot_eager) included."""
    import torch._dynamo

    return torch._dynamo.list_backends(exclude_tags=())


def apply_compile(fn: Any, cfg: Compile.Config) -> Any:
    """`torch.compile(fn)` with the config's options (a module or any callable; compiles lazily, on first call)."""
    return torch.compile(
        fn,
        backend=cfg.backend,
        mode=None if cfg.mode == "default" else cfg.mode,
        fullgraph=cfg.fullgraph,
        dynamic=cfg.dynamic,
    )


def compile_blocks(model: torch.nn.Module, cfg: Compile.Config) -> list[torch.nn.Module]:
    """Compile each repeated block of `model` in place (nn.Module.compile); blocks of one class share the code,
    so dynamo compiles it once. None found: a warning, and the model runs eagerly."""
    blocks = repeated_blocks(model)
    if not blocks:
        log.warning(
            "compile: regional found no repeated blocks (a ModuleList or Sequential of same-class "
            "modules) to compile; the model runs eagerly. Use `regional: false` to compile it whole"
        )
    for block in blocks:
        block.compile(
            backend=cfg.backend,
            mode=None if cfg.mode == "default" else cfg.mode,
            fullgraph=cfg.fullgraph,
            dynamic=cfg.dynamic,
        )
    return blocks


class DynamoStats:
    """What dynamo did since this object was made: compile seconds, graph breaks, recompilations."""

    def __init__(self):
        from torch._dynamo.utils import counters

        self._since_us = time.time_ns() // 1000
        self._compile_s = _compile_seconds()
        self._breaks = Counter(counters["graph_break"])
        self._graphs = _graph_count()

    @classmethod
    def since_start(cls) -> DynamoStats:
        """Totals since the process started (an unchanged script's compilations, read from outside it)."""
        stats = cls()
        stats._since_us, stats._compile_s, stats._breaks, stats._graphs = 0, 0.0, Counter(), 0
        return stats

    def read(self) -> dict[str, Any]:
        """Totals since creation, plus `break_reasons` and per-function `recompile_reasons` for messages."""
        from torch._dynamo.utils import counters

        breaks = Counter(counters["graph_break"]) - self._breaks
        per_frame = self._recompiles_per_frame()
        now_s = _compile_seconds()
        return {
            "seconds": now_s - self._compile_s if now_s >= self._compile_s else now_s,  # reset() zeroes dynamo's sum
            "graph_breaks": sum(breaks.values()),
            "recompiles": sum(len(reasons) for reasons in per_frame.values()),
            "graphs": max(_graph_count() - self._graphs, 0),
            "break_reasons": list(breaks),
            "recompile_reasons": per_frame,
        }

    def _recompiles_per_frame(self) -> dict[str, list[str]]:
        """Function -> the reason of each recompilation (dynamo keeps records of its last 64 compiles)."""
        from torch._dynamo.utils import get_compilation_metrics

        per_frame: dict[str, list[str]] = {}
        for record in get_compilation_metrics():
            reason = getattr(record, "recompile_reason", None)  # fields differ across torch versions
            if (getattr(record, "start_time_us", None) or 0) < self._since_us or not reason:
                continue
            where = (
                f"{getattr(record, 'co_name', '?')} ({getattr(record, 'co_filename', '?')}:"
                f"{getattr(record, 'co_firstlineno', '?')})"
            )
            per_frame.setdefault(where, []).append(reason)
        return per_frame


def _graph_count() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def seconds_compiled() -> float:
    """Dynamo's compile seconds in this process so far; 0 where it never ran (nothing imported for it)."""
    return _compile_seconds() if "torch._dynamo" in sys.modules else 0.0


def _compile_seconds() -> float:
    from torch._dynamo.utils import calculate_time_spent

    return calculate_time_spent().get("total_wall_time", 0.0)  # forward frames plus AOT backward graphs


def check_backend(value: str) -> str:
    """`value` if dynamo knows the backend, else a ValueError naming the usual ones (a config validator)."""
    backends = known_backends()
    if value not in backends:
        import torch._dynamo

        usual = sorted(set(torch._dynamo.list_backends()) | {"eager", "aot_eager"})
        raise ValueError(
            f"unknown torch.compile backend `{value}`{did_you_mean(value, backends)}; use "
            f"one of {', '.join(usual)} (torch._dynamo.list_backends(exclude_tags=()) also "
            "lists the debugging ones)"
        )
    return value


def unavailable(device: torch.device, backend: str) -> str | None:
    """Why torch.compile with `backend` cannot run on `device` here, or None."""
    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile is not supported on this Python version or platform"
    if device.type == "xla" and backend != "openxla":
        return f"backend `{backend}` cannot compile for XLA devices; use backend: openxla"
    if device.type == "cpu" and backend == "inductor" and not _has_cpp_compiler():
        return (
            "inductor generates C++ for CPUs and found no C++ compiler (install g++ or set CXX); "
            "backend: aot_eager runs without one"
        )
    return None


def _has_cpp_compiler() -> bool:
    from torch._inductor import cpp_builder

    try:
        cpp_builder.get_cpp_compiler()
    except Exception:  # InvalidCxxCompiler, or whatever an older torch raises for "none found"
        return False
    return True


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


@registered("compile")
class Compile(Speedup):
    """torch.compile the model (or forward + loss); compile seconds, graph breaks and recompiles go to metrics."""

    phase = Phase.COMPILE  # last: it must capture the model as every other speed-up has left it
    compiles_model = reports_compile = True
    tune = (
        Candidate(),
        Candidate({"regional": True}, needs="repeated_blocks"),
        Candidate({"mode": "max-autotune"}, cuda_only=True),
    )  # its kernel search pays off on GPUs only

    class Config(SpeedupConfig):
        mode: Mode = Field(
            "default",
            description="inductor's trade-off: `default`; `reduce-overhead` (CUDA graphs, for small "
            "batches on a GPU); `max-autotune` (long compile, searches kernels); `max-autotune-no-cudagraphs`",
        )
        backend: str = Field(
            "inductor",
            description="dynamo backend: `inductor` generates fused kernels; `aot_eager` and `eager` "
            "only trace (quick checks that the model compiles)",
        )
        fullgraph: bool = Field(False, description="fail on the first graph break instead of splitting the graph")
        dynamic: bool | None = Field(
            None,
            description="dynamic shapes: null lets dynamo mark a dimension dynamic after it changes once; "
            "false specialises every shape",
        )
        whole_step: bool = Field(
            False,
            description="compile forward and loss as one graph (the engine's `forward_loss`) instead of the "
            "model alone; evaluation then runs the model eagerly",
        )
        regional: bool = Field(
            False,
            description="compile each repeated block (a transformer's layers: the members of a ModuleList "
            "or Sequential of same-class modules) instead of the whole model: blocks share one compiled graph, "
            "so compiling costs about one block's time; the code between blocks runs eagerly",
        )
        recompile_limit: int | None = Field(
            None,
            ge=1,
            description="recompilations of one function before dynamo falls back to eager for it; "
            "null keeps torch's default (8). Restored after the run",
        )
        release_workers: bool = Field(
            True,
            description="stop inductor's compile-worker processes after each compilation (the first step, an "
            "evaluation's graphs) instead of torch's 60 s, without waiting for them to exit: on a GPU host they "
            "competed with the loop for the CPU. A recompilation starts them again",
        )
        warn_recompiles: int = Field(
            4,
            ge=1,
            description="warn, with dynamo's reasons, once one function has been recompiled more than "
            "this many times (the train/eval switch and one batch-size change account for about 3)",
        )

        @field_validator("backend")
        @classmethod
        def _known_backend(cls, value: str) -> str:
            return check_backend(value)

        @model_validator(mode="after")
        def _one_scope(self) -> "Compile.Config":
            if self.regional and self.whole_step:
                raise ValueError("`regional` compiles blocks and `whole_step` the whole forward and loss: choose one")
            return self

        @model_validator(mode="after")
        def _mode_needs_inductor(self) -> "Compile.Config":
            if self.mode != "default" and self.backend != "inductor":
                raise ValueError(
                    f"mode `{self.mode}` only applies to the inductor backend (backend `{self.backend}` "
                    "would silently ignore it); use mode: default or backend: inductor"
                )
            return self

    def __init__(self, cfg: Compile.Config | None = None):
        super().__init__(cfg)
        self._stats: DynamoStats | None = None
        self._final: dict[str, Any] = {}
        self._warned: set[str] = set()
        self._blocks: list[torch.nn.Module] = []  # compiled in place (regional)
        self._graphs_seen = 0

    def conflict(self, context: Context) -> str | None:
        # FSDP2's hooks split the graph at every sharded block, so dynamo compiles each block's forward on its
        # own and blocks of other widths recompile it; with `dynamic: null` those recompilations turn
        # dynamic, and inductor failed on the dynamic graphs (ResNet-18, CPU, torch 2.14.1)
        if context.strategy == "fsdp" and self.cfg.dynamic is not False:
            return (
                "sharded blocks are compiled one by one and blocks of other shapes recompile them; set "
                "`speedups.compile.dynamic=false` (one graph per block shape)"
            )
        return unavailable(context.device, self.cfg.backend) or one_program(self, context)

    def replaces_step(self) -> bool:
        return self.cfg.whole_step

    def setup(self, engine: Slots) -> None:
        import torch._dynamo

        self._recompile_limit = torch._dynamo.config.recompile_limit
        if self.cfg.recompile_limit is not None:
            torch._dynamo.config.recompile_limit = self.cfg.recompile_limit
        self._stats, self._final = DynamoStats(), {}
        self._graphs_seen = _graph_count()
        if self.cfg.whole_step:
            engine.replace("forward_loss", apply_compile(engine.forward_loss, self.cfg))
        elif self.cfg.regional:
            self._blocks = compile_blocks(engine.module, self.cfg)
        else:
            engine.replace("model", apply_compile(engine.model, self.cfg))

    def after_batch(self) -> None:
        if self.cfg.release_workers and self.cfg.backend == "inductor":
            self._release_workers()

    def _release_workers(self) -> None:
        """Once dynamo made new graphs (since the last batch: their compilation is over), stop inductor's pool of
        compile workers; torch would keep them 60 s, the first minute of training."""
        graphs = _graph_count()
        if graphs == self._graphs_seen:
            return
        self._graphs_seen = graphs
        release_compile_workers()

    def metrics(self) -> dict[str, Any]:
        if self._stats is None:
            return dict(self._final)
        stats = self._stats.read()
        return {key: stats[key] for key in ("seconds", "graph_breaks", "recompiles", "graphs")}

    def end_epoch(self) -> None:
        self.after_batch()  # the epoch's evaluation may have compiled graphs of its own
        if self._stats is not None:
            self._warn(self._stats.read())

    def _warn(self, stats: dict[str, Any]) -> None:
        """Say each problem once per run: it is looked for at every epoch end and at teardown."""
        if stats["break_reasons"] and "breaks" not in self._warned:
            self._warned.add("breaks")
            reasons = "; ".join(sorted({_first_line(r) for r in stats["break_reasons"]}))
            log.warning(
                "compile: %d graph break(s), each one a return to Python between graphs: %s",
                stats["graph_breaks"],
                reasons,
            )
        for where, reasons in stats["recompile_reasons"].items():
            if len(reasons) > self.cfg.warn_recompiles and where not in self._warned:
                self._warned.add(where)
                log.warning(
                    "compile: %s was recompiled %d times, so recompilations keep happening (each costs a "
                    "compile; at %d dynamo falls back to eager). Last reason: %s. Steady shapes (drop_last), "
                    "`dynamic: true` or TORCH_LOGS=recompiles help find the cause.",
                    where,
                    len(reasons),
                    self.cfg.recompile_limit or self._recompile_limit,
                    _first_line(reasons[-1]),
                )

    def teardown(self) -> None:
        import torch._dynamo

        if self._stats is None:
            return
        self.end_epoch()  # a run shorter than an epoch is looked at too
        self._final = self.metrics()
        self._stats = None
        for block in self._blocks:
            block._compiled_call_impl = None  # what nn.Module.compile set: calls go to forward again
        self._blocks = []
        torch._dynamo.config.recompile_limit = self._recompile_limit
        torch._dynamo.reset()  # drop compiled code and guards so the next run in this process starts clean
