"""`cuda_graphs`: capture the whole training step (forward, loss, backward, clipping, the optimizer step) in one CUDA
graph and replay it: a step costs the host one launch instead of hundreds, for runs whose GPU waits on the host.

Why `torch.cuda.graph` rather than torch.compile's mode "reduce-overhead" (CUDA graph trees): dynamo does not trace
`loss.backward()` (short of compiled autograd), so a compiled step splits at backward into forward, backward and
optimizer graphs with the host between them, after minutes of inductor. A manual capture records the step exactly
as it runs eagerly (any model, the strategy's backward, the precision, any optimizer) as one graph, compiling
nothing. What capture cannot survive is refused before it, each with its reason:
- by the one conflict rule, before setup: not CUDA; fp16 (the GradScaler reads its inf check on the host); a
  strategy other than plain; another speed-up that turns the model into another program; and the run's own
  choices (`Context.run`): gradient accumulation (micro-batches that do not step are another program), a loader
  that keeps the last incomplete batch (a graph has fixed shapes), a schedule with an optimizer that cannot read a
  tensor learning rate on the device (no `capturable` option);
- only the step itself shows, so during warm-up and replay: a host sync inside the step (`.item()` in a loss,
  say): the last eager warm-up step runs with `torch.cuda.set_sync_debug_mode("error")`, so it fails there,
  named, instead of inside the capture; a batch of another shape after capture (a loader without `drop_last`
  that is not a DataLoader, a varying sequence length): every replay compares shapes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import torch
from pydantic import Field

from ..batches import map_tensors, tensors
from ..errors import AccelError
from .base import Context, Phase, RunFacts, Speedup, SpeedupConfig, one_program, registered
from .compiled_optimizer import tensor_lrs

if TYPE_CHECKING:
    from ..strategy.slots import Slots

log = logging.getLogger("accel")


def run_problems(run: RunFacts) -> list[str]:
    """What in the run's own choices a captured step could not follow (each with what to change)."""
    problems = []
    if run.grad_accum > 1:
        problems.append(
            f"gradient accumulation ({run.grad_accum} micro-batches a step): micro-batches that do not step would "
            "need a second graph; use a larger batch size and grad_accum 1"
        )
    if run.drop_last is False:
        problems.append(
            "the training loader keeps its last incomplete batch, whose shape differs from the captured one; "
            "drop it (`data.drop_last: true`, a DataLoader's `drop_last=True`)"
        )
    if run.scheduled and run.optimizer is not None and not run.optimizer.capturable:
        problems.append(
            f"{run.optimizer.name} has no `capturable` option, so a captured step would keep the learning rate it "
            "was captured with and ignore the schedule; use an optimizer that has one (adamw) or no schedule"
        )
    return problems


def make_capturable(optimizer: torch.optim.Optimizer) -> None:
    """Turn on `capturable` where the optimizer has it: its step counts then live on the device and it reads a
    tensor learning rate there, so nothing in its step syncs with the host. A resumed state's counts move too."""
    if not all("capturable" in group for group in optimizer.param_groups):
        return
    for group in optimizer.param_groups:
        group["capturable"] = True
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            if isinstance(state.get("step"), torch.Tensor):
                state["step"] = state["step"].to(param.device, torch.float32)
    optimizer.defaults["capturable"] = True


@contextmanager
def syncs_refused() -> Iterator[None]:
    """Any op that makes the host wait for the GPU raises inside: what a capture would fail on, found eagerly."""
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    except RuntimeError as err:
        raise AccelError(
            "speed-up `cuda_graphs`: the training step waits for the GPU on the host (an `.item()`, `.cpu()` or "
            f"`print` of a tensor in the model or loss, or a data-dependent shape), which a CUDA graph cannot "
            f"capture: {str(err).strip().splitlines()[0]}. Remove the sync or disable cuda_graphs."
        ) from err
    finally:
        torch.cuda.set_sync_debug_mode(before)


class CapturedStep:
    """The engine's `step_batch`: eager warm-up steps on a side stream, then one capture, then a replay per
    batch; after each, the host's part of the step (`engine.finish_step`)."""

    def __init__(self, engine: Slots, warmup_steps: int):
        self.engine, self.warmup_steps, self.warmed = engine, warmup_steps, 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_batch: Any = None
        self.static_loss: torch.Tensor | None = None
        # the learning rates the captured step reads, refilled from the schedule's floats before each replay
        self._lrs = [torch.zeros((), device=engine.device) for _ in engine.optimizer.param_groups]

    def __call__(self, batch: Any, boundary: bool) -> torch.Tensor:
        if self.graph is not None:
            loss = self._replay(batch)
        elif self.warmed < self.warmup_steps:
            loss = self._warm_up(batch)
        else:
            loss = self._capture(batch)
        self.engine.finish_step(True)  # no GradScaler here (fp16 is refused): every step is applied
        return loss

    def _numeric_step(self, batch: Any) -> torch.Tensor:
        engine = self.engine
        with tensor_lrs(engine.optimizer.param_groups, self._lrs, fill=False):  # filled by _fill_lrs, uncaptured
            loss = engine.forward_backward(batch)
            engine.optimizer_step()
        return loss

    def _fill_lrs(self) -> None:
        """This step's learning rates into the tensors the step reads (a kernel launch each, no host sync)."""
        for tensor, group in zip(self._lrs, self.engine.optimizer.param_groups, strict=True):
            tensor.fill_(group["lr"])

    def _warm_up(self, batch: Any) -> torch.Tensor:
        # on a side stream, as torch's CUDA-graph notes ask: lazy state (optimizer moments, cuDNN's choices,
        # autocast) is built before capture, outside it
        side = torch.cuda.Stream(self.engine.device)
        side.wait_stream(torch.cuda.current_stream(self.engine.device))
        self.warmed += 1
        self._fill_lrs()
        with torch.cuda.stream(side), syncs_refused() if self.warmed == self.warmup_steps else nullcontext():
            loss = self._numeric_step(batch)
        torch.cuda.current_stream(self.engine.device).wait_stream(side)
        return loss

    def _capture(self, batch: Any) -> torch.Tensor:
        self.static_batch = map_tensors(torch.clone, batch)
        self.engine.optimizer.zero_grad(set_to_none=True)  # backward allocates the gradients in the graph's pool
        self.graph = torch.cuda.CUDAGraph()
        self._fill_lrs()
        with torch.cuda.graph(self.graph):
            self.static_loss = self._numeric_step(self.static_batch)
        log.info("cuda_graphs: captured the training step after %d eager warm-up steps", self.warmed)
        return self._replay(batch)  # capturing records the kernels without running them: this batch runs now

    def _replay(self, batch: Any) -> torch.Tensor:
        new, static = tensors(batch), tensors(self.static_batch)
        if [(t.shape, t.dtype) for t in new] != [(t.shape, t.dtype) for t in static]:
            raise AccelError(
                "speed-up `cuda_graphs`: a batch of shapes "
                f"{[tuple(t.shape) for t in new]} reached a step captured for {[tuple(t.shape) for t in static]}; "
                "a CUDA graph replays fixed shapes. Give the loader fixed-size batches (data.drop_last: true, "
                "fixed sequence lengths) or disable cuda_graphs."
            )
        for dst, src in zip(static, new, strict=True):
            dst.copy_(src, non_blocking=True)
        self._fill_lrs()
        self.graph.replay()
        return self.static_loss.clone()  # the next replay overwrites static_loss


@registered("cuda_graphs")
class CudaGraphs(Speedup):
    """Capture the whole training step in one CUDA graph and replay it (CUDA; fixed shapes, no host syncs)."""

    phase = Phase.COMPILE  # last: it records the step every other phase has shaped
    # no tune candidate: it has not been measured (no GPU where it was written)

    class Config(SpeedupConfig):
        warmup_steps: int = Field(
            3,
            ge=2,
            description="eager training steps before the capture (the first builds the optimizer's state, whose "
            "host-to-device copies are syncs; cuDNN chooses its kernels); the last one refuses host syncs, so a "
            "step that cannot be captured fails there with its reason",
        )

    def __init__(self, cfg: Config | None = None):
        super().__init__(cfg)
        self._step: CapturedStep | None = None
        self._captured = False

    def conflict(self, context: Context) -> str | None:
        if context.device.type != "cuda":
            return f"needs CUDA: a CUDA graph records CUDA kernels (device here: {context.device.type})"
        if context.precision == "fp16":
            return (
                "fp16's GradScaler reads its inf/NaN check on the host before each step, which a graph cannot "
                "capture; use `speedups.amp.dtype: bf16` (no scaler) or fp32"
            )
        spread = f"strategy {context.strategy}: its collectives are not captured by accel; train in one process"
        chosen = [one_program(self, context), spread if context.strategy != "plain" else None]
        problems = [p for p in chosen if p is not None] + run_problems(context.run)  # all named at once
        return "; ".join(problems) or None

    def replaces_step(self) -> bool:
        return True

    def setup(self, engine: Slots) -> None:
        make_capturable(engine.optimizer)
        self._step = CapturedStep(engine, self.cfg.warmup_steps)
        engine.replace("step_batch", self._step)

    def metrics(self) -> dict[str, Any]:
        if self._step is not None:
            self._captured = self._step.graph is not None
        return {"captured": self._captured}

    def teardown(self) -> None:
        if self._step is None:
            return
        self.metrics()
        self._step = None  # frees the graph and its memory pool (the engine put its eager step back)
