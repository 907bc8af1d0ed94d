"""FLOPs of one training step, counted once for any model by torch's FlopCounterMode, not by a per-model formula.

The count runs forward, loss and backward of the task on the plain module over a real batch, without side
effects: the parameters are used as they are but gradients are returned, not accumulated; buffers (BatchNorm's
running statistics) are copies; the RNG streams are forked. The optimizer's own arithmetic is not counted (the
usual convention for MFU), nor what a speed-up's `counting_context` leaves out (activation checkpointing's
recomputed forward: extra hardware work, not model work).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch.func import functional_call

from ..batches import leading_size, leading_tensor, map_tensors, tensors
from ..strategy import sharding
from ..strategy.precision import DTYPES
from . import peaks

if TYPE_CHECKING:
    from ..engine.core import Core  # the run's device, module, precision and step contexts

log = logging.getLogger("accel")
aten = torch.ops.aten


def _attention(query, key, value, *args, out_shape=None, **kwargs) -> int:
    from torch.utils import flop_counter

    return flop_counter.sdpa_flop_count(query, key, value)


def _attention_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    from torch.utils import flop_counter

    return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)


# torch counts the CUDA attention kernels but not the CPU one: without these, a GPT's attention is missing
EXTRA_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _attention_backward,
}


def count_step_flops(module: torch.nn.Module, task: Any, batch: Any, contexts: AbstractContextManager) -> int:
    """Floating-point operations of forward + loss + backward of `task` on `batch` (one micro-batch)."""
    from torch.utils import flop_counter  # imported when counting: it imports triton (0.1 s of every start-up)

    params = dict(module.named_parameters())
    state = {**params, **{name: buffer.clone() for name, buffer in module.named_buffers()}}
    trainable = [p for p in params.values() if p.requires_grad]

    def model(*args: Any, **kwargs: Any) -> Any:
        return functional_call(module, state, args, kwargs)

    cuda = sorted({p.device.index or 0 for p in trainable if p.device.type == "cuda"})
    # compiled parts (regional compile) run eagerly here: counting must not trigger a compile of its own
    with torch.random.fork_rng(devices=cuda), torch.compiler.set_stance("force_eager"), contexts:
        with flop_counter.FlopCounterMode(display=False, custom_mapping=EXTRA_FORMULAS) as counter:
            loss = task.loss(model, batch)
            torch.autograd.grad(loss, trainable, allow_unused=True)
    return counter.get_total_flops()


PRECISIONS = {dtype: name for name, dtype in DTYPES.items()}  # an autocast dtype -> its precision's name


def forward_precision(model: torch.nn.Module, device: torch.device) -> str:
    """The precision a training forward runs in, asked inside it: autocast's, else the model's parameters'."""
    if torch.is_autocast_enabled(device.type):
        return PRECISIONS.get(torch.get_autocast_dtype(device.type), "fp32")
    dtype = next((p.dtype for p in model.parameters()), torch.float32)
    return PRECISIONS.get(dtype, "fp32")


def compute_dtype(precision: str, device: torch.device, module: torch.nn.Module) -> str:
    """The dtype the step's matmuls and convolutions run in: the precision's, else TF32 where CUDA runs the
    module's fp32 matmuls, or its convolutions, in TF32, else fp32."""
    if precision != "fp32" or device.type != "cuda":
        return precision
    backends = torch.backends
    # cuDNN's convolutions default to TF32: a ResNet "in fp32" would read over 100% of the fp32 peak, where a
    # transformer's matmuls stay fp32 (51% of it for a GPT-2 on an H200, not 7% of TF32's)
    convolutions = any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in module.modules())
    matmul_tf32 = _runs_tf32(backends.cuda.matmul)
    conv_tf32 = convolutions and _runs_tf32(getattr(backends.cudnn, "conv", backends.cudnn))
    return "tf32" if matmul_tf32 or conv_tf32 else "fp32"


def _runs_tf32(backend: Any) -> bool:
    """Whether a CUDA backend runs fp32 in TF32. torch >= 2.9's per-backend field says so whichever API set it;
    its legacy flag cannot be read once the new API was used (the Hugging Face Trainer's --tf32 uses it)."""
    precision = getattr(backend, "fp32_precision", None)
    return precision == "tf32" if precision is not None else bool(backend.allow_tf32)


COUNT_SAMPLES = 4  # FLOPs grow linearly with the batch: counting a few samples costs a few % of one step


def first_samples(batch: Any, samples: int, few: int) -> Any:
    """The batch cut to its first `few` samples: every tensor whose leading dimension is the sample count."""
    return map_tensors(lambda t: t[:few] if t.dim() and len(t) == samples else t, batch)


def few_samples(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The first COUNT_SAMPLES samples of a forward's inputs, copied (the loop may refill its own tensors)."""
    samples = leading_size((args, kwargs))
    few = first_samples((args, kwargs), samples, min(samples, COUNT_SAMPLES))
    return map_tensors(lambda t: t.detach().clone(), few)


class ForwardSum:
    """The step FLOP counting runs for a loop of the user's own or an unchanged script, whose loss accel never sees:
    the model's forward on a training forward's inputs (`few_samples`), a sum of its first output standing in for
    the loss (a loss adds few FLOPs)."""

    @staticmethod
    def samples(batch: Any) -> int:
        return leading_size(batch)

    @staticmethod
    def loss(model: Any, batch: Any) -> torch.Tensor:
        args, kwargs = batch
        outputs = model(*args, **kwargs)
        first = leading_tensor(outputs)  # else a model that returns its loss alone
        return (first if first is not None else tensors(outputs)[0]).float().sum()


def _counting_contexts(run: Core) -> ExitStack:
    stack = run.step_contexts()
    for speedup in run.speedups:
        stack.enter_context(speedup.counting_context())
    return stack


def mfu_percent(mfu: float) -> str:
    """An MFU as a percentage to two significant digits: 45%, 5.5%, 0.0063% (never "0.0%" for a small one)."""
    pct = 100 * mfu
    return f"{pct:.0f}%" if pct >= 10 else f"{float(f'{pct:.2g}'):g}%"


class Utilisation:
    """FLOPs per sample, counted on the first training batch, and the peak they are compared with: what turns a
    throughput into FLOP/s and MFU (model FLOPs utilisation)."""

    def __init__(self) -> None:
        self.counted = False
        self.flops_per_batch: int | None = None  # the first micro-batch's
        self.flops_per_sample: float | None = None
        self.peak = None

    def count(self, run: Core, task: Any, batch: Any) -> float:
        """Count once, `task`'s step (its `samples` and `loss`) on the batch's first few samples, in the run's
        step contexts; the seconds it took, which are not training time."""
        contexts = partial(_counting_contexts, run)  # entered where a failure costs only the figure
        return self.count_module(run.module, run.device, run.strategy.precision.name, task, batch, contexts)

    def count_module(
        self,
        module: torch.nn.Module,
        device: torch.device,
        precision: str,
        task: Any,
        batch: Any,
        contexts: Callable[[], AbstractContextManager],
    ) -> float:
        """Count once, `task`'s step of `module` on the batch's first few samples under `contexts()`, against the
        peak of `precision` on `device` (not on sharded or XLA models); the seconds it took. A model or task the
        counter cannot follow costs the figure, not the run."""
        self.counted, start = True, time.perf_counter()
        if device.type == "xla" or sharding.is_sharded(module):
            return 0.0
        samples = max(task.samples(batch), 1)
        few = min(samples, COUNT_SAMPLES)
        try:
            flops = count_step_flops(module, task, first_samples(batch, samples, few), contexts())
        except Exception as err:  # noqa: BLE001 - any failure only loses the figure
            log.info("FLOPs not counted: %s: %s", type(err).__name__, err)
            flops = None
        if flops:
            self.flops_per_sample = flops / few
            self.flops_per_batch = round(self.flops_per_sample * samples)
            try:
                self.peak = peaks.run_peak(device, compute_dtype(precision, device, module))
            except Exception as err:  # noqa: BLE001 - a probe that fails costs the MFU, not the run
                log.info("no peak FLOP/s for MFU: %s", err)
        return time.perf_counter() - start

    def stats(self, samples_per_s: float | None) -> dict[str, float | None]:
        if self.flops_per_sample is None or samples_per_s is None:
            return {}
        flop_per_s = self.flops_per_sample * samples_per_s
        if self.peak and flop_per_s > self.peak.flop_per_s and not self.peak.source.startswith("datasheet"):
            self.peak = peaks.reached(self.peak, flop_per_s)  # a CPU's: its clock or probe read low
        return {"flop_per_s": flop_per_s, "mfu": flop_per_s / self.peak.flop_per_s if self.peak else None}

    @property
    def peak_dtype(self) -> str | None:
        """The dtype whose peak the MFU is of: a bench report says it (a bf16 MFU of 10% and an fp32 one of 51%
        are not on one scale)."""
        return self.peak.dtype if self.peak else None
