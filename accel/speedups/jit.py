"""`jit`: TorchScript the model with `script` or `trace`, for stacks where torch.compile is not an option.

TorchScript is deprecated upstream (PyTorch 2.10): torch warns a FutureWarning for every submodule it scripts.
accel says so once per process instead, with what to use (`speedups.compile`; `torch.export` to ship a model),
and keeps torch's repeats out of the log. `accel tune` never picks it, and the speed lint names it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

import torch
from pydantic import Field
from torch import nn

from ..errors import AccelError
from ..measure.traps import Finding
from .base import Context, Phase, Speedup, SpeedupConfig, one_program, registered

if TYPE_CHECKING:
    from ..strategy.slots import Slots

log = logging.getLogger("accel")
_deprecation_said = False


@contextmanager
def _quiet_torchscript() -> Iterator[None]:
    """Silence torch's per-submodule deprecation repeats and the tracer's notes on torch's own size checks
    (BatchNorm's); tracer warnings about the user's code still show."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=FutureWarning)
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning, module=r"torch\.nn\.")
        yield


def say_deprecated_once() -> None:
    """Log, once per process, that TorchScript is deprecated upstream."""
    global _deprecation_said
    if not _deprecation_said:
        _deprecation_said = True
        log.warning(
            "jit: TorchScript (torch.jit.script/trace) is deprecated upstream since PyTorch 2.10 and "
            "gets no new features; it stays here for older stacks. Use `speedups.compile` (torch.compile) "
            "to train faster, and torch.export (`accel export --format exported`) to ship a model."
        )


def trace_module(module: nn.Module, example: torch.Tensor) -> torch.jit.ScriptModule:
    """`torch.jit.trace` without side effects: tracing runs forward once, which would otherwise update
    BatchNorm statistics an extra time and draw from the CPU random generator."""
    saved = {name: buffer.clone() for name, buffer in module.named_buffers()}
    with _quiet_torchscript(), torch.random.fork_rng(devices=[]):
        traced = torch.jit.trace(module, example, check_trace=False)
    with torch.no_grad():
        for name, buffer in module.named_buffers():
            buffer.copy_(saved[name])
    return traced


class TracedPerMode(nn.Module):
    """Traces the wrapped module on its first call in each mode (train, eval).

    A trace freezes mode-dependent branches, such as BatchNorm using batch or running statistics, so one trace
    cannot serve both. The traces share the module's parameters.
    """

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module
        self.traces: dict[bool, torch.jit.ScriptModule] = {}  # a plain dict: no second copy in state_dict

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        traced = self.traces.get(self.training)
        if traced is None:
            traced = self.traces[self.training] = trace_module(self.module, inputs)
        return traced(inputs)


def apply_jit(model: nn.Module, method: str) -> nn.Module:
    """The model as TorchScript: `script` compiles its Python source, `trace` records the ops of a first call."""
    if method == "trace":
        return TracedPerMode(model)
    try:
        with _quiet_torchscript():
            return torch.jit.script(model)
    except (RuntimeError, torch.jit.frontend.FrontendError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise AccelError(
            f"jit: TorchScript cannot script {type(model).__name__}: {first}. Use `jit: {{method: "
            "trace}` (records one call instead of reading the source) or the `compile` speed-up."
        ) from None


@registered("jit")
class Jit(Speedup):
    """TorchScript the model (script or trace): for older stacks; deprecated upstream, use `compile` instead."""

    phase = Phase.COMPILE  # after layout and precision speed-ups, so the scripted model sees their changes
    compiles_model = True
    lint_finding = Finding(
        "torchscript",
        "speed-up jit (TorchScript) is on: deprecated upstream since PyTorch 2.10, no new optimisations, and often "
        "slower than torch.compile.",
        "`speedups: {compile: {}}` instead of `jit` (torch.export to ship the model).",
    )

    class Config(SpeedupConfig):
        method: Literal["script", "trace"] = Field(
            "script",
            description="`script` compiles the model's Python source and keeps its control flow; "
            "`trace` records the ops of the first batch (in train and eval mode each), for models script rejects",
        )

    def conflict(self, context: Context) -> str | None:
        if context.strategy == "fsdp":
            return "TorchScript cannot script or trace FSDP2's hooks (`compile` can compile a sharded model)"
        return one_program(self, context)

    def setup(self, engine: Slots) -> None:
        say_deprecated_once()
        engine.replace("model", apply_jit(engine.model, self.cfg.method))
