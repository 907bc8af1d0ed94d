"""The step's anatomy: the loop names its phases (data wait, copy to the device, forward, loss, backward, optimizer
step, the speed-ups' hooks, logging, evaluation) and, while a profiler records, each becomes a `record_function`
range in the trace and a timed, memory-sampled segment here (accel/profile reads them).

Off, a phase costs a flag test: `record_function` costs ~8 us even with no profiler (8.5 us against 0.45 us for
`nullcontext` on a 2-core EPYC), so the ranges exist only while `active`. Phases nest (the model's forward inside
the loss): the time is kept as flat segments, each belonging to the innermost phase open, so the phases of a step
add up to it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import psutil
import torch
from torch import nn
from torch.profiler import record_function

from .. import devices

PREFIX = "accel/"  # every range the loop opens: the trace's phase and module ranges start with it
MODULE = PREFIX + "module/"  # ranges around the model's top-level children, for grouping operators


@dataclass
class Segment:
    phase: str
    start: float  # time.perf_counter() seconds
    end: float
    peak_mb: float | None  # CUDA: allocated peak in the segment; CPU: resident set at its end; None: `other`


def compiled_in_place(module: nn.Module) -> bool:
    """Whether `module.compile()` made its calls compiled ones, hooks included: a hook added now would recompile it."""
    return getattr(module, "_compiled_call_impl", None) is not None


@dataclass
class Anatomy:
    """The loop's phases, timed only while `active` (ProfileWindow in accel/profile turns it on and off)."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    active: bool = False
    segments: list[Segment] = field(default_factory=list)
    _open: list[str] = field(default_factory=list)
    _since: float = 0.0
    _hooks: list[Any] = field(default_factory=list)
    _process: psutil.Process = field(default_factory=psutil.Process)

    def phase(self, name: str):
        """A context around one phase: free unless active."""
        return self._range(name) if self.active else nullcontext()

    def batches(self, iterator: Iterable) -> Iterator:
        """The iterator's items, each fetch a `data` phase (the wait for the loader)."""
        iterator = iter(iterator)
        while True:
            with self.phase("data"):
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
            yield batch

    def start(self, model: nn.Module | None, module: nn.Module | None) -> float:
        """Begin timing; `model` is what the loop calls (its forward is the `forward` phase), `module` the plain
        model whose top-level children name the trace's module ranges. A compiled model (torch.compile's wrapper,
        or a module compiled in place) gets no hooks: adding them would recompile it mid-window, so its forward is
        counted in `loss`. None: no model to hook, its forward in the loop's time."""
        self.active, self.segments, self._since = True, [], time.perf_counter()
        devices.reset_peak_memory(self.device)
        if model is not None and getattr(model, "_orig_mod", None) is None and not compiled_in_place(model):
            self._hooks = _range_hooks(model, lambda: self._range("forward"))
            for name, child in _parts(module):
                label = f"{MODULE}{name} ({type(child).__name__})"
                self._hooks += _range_hooks(child, lambda label=label: record_function(label))
        return self._since

    def stop(self) -> float:
        """Stop timing; returns when (perf_counter), so the last step ends where its last segment does."""
        self._switch()
        self.active = False
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        return self._since

    @contextmanager
    def _range(self, name: str):
        with record_function(PREFIX + name):
            self._switch()
            self._open.append(name)
            try:
                yield
            finally:
                if self.active:  # the window may have closed inside this phase (it closes in `logging`)
                    self._switch()
                self._open.pop()

    def _switch(self) -> None:
        """Close the segment of the phase open until now (nothing open: the loop's own `other` time)."""
        # no synchronize here: it would idle the GPU between phases and hide the host-bound signal; on CUDA a phase's
        # time is the host's, and GPU work shows where the host waits for it (accel/profile/gpu.py has the GPU's view)
        now = time.perf_counter()
        phase = self._open[-1] if self._open else "other"
        memory = None if phase == "other" else self._memory_mb()  # other's share: half the reads (~30 us each)
        self.segments.append(Segment(phase, self._since, now, memory))
        devices.reset_peak_memory(self.device)
        self._since = now

    def _memory_mb(self) -> float:
        if self.device.type == "cuda":
            return devices.peak_memory_mb(self.device)
        return self._process.memory_info().rss / 2**20


def _parts(module: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """The model's top-level children; a list or dict of modules (a transformer's blocks) is never called itself,
    so its members stand for it."""
    for name, child in module.named_children():
        if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
            yield from ((f"{name}.{key}", member) for key, member in child.named_children())
        else:
            yield name, child


def _range_hooks(module: nn.Module, make) -> list[Any]:
    """Forward pre- and post-hooks that open a range (`make()`) around the module's forward."""
    opened = []

    def enter(*_):
        opened.append(make())
        opened[-1].__enter__()

    def leave(*_):
        opened.pop().__exit__(None, None, None)

    return [module.register_forward_pre_hook(enter), module.register_forward_hook(leave, always_call=True)]
