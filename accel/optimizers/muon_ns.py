"""Muon with its Newton-Schulz orthogonalisation in a chosen dtype (`optim.ns_dtype`, docs/optimizers.md).

torch's Muon orthogonalises in bf16, hard-coded (torch/optim/_muon.py, `grad.bfloat16()`). Where bf16 is
emulated (an AVX2-only CPU) that iteration costs ~25x its fp32 run and dominates the step, so `auto` runs it in
float32 there. torch offers no seam for the dtype (`_single_tensor_muon` calls its module's own function), so
`DtypeMuon.step` repeats torch's per-matrix update with that one change; with bfloat16 it equals torch's Muon
(tests/optimizers/test_optim_muon.py). Its state and groups are torch's Muon's, so checkpoints are unchanged.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, DEFAULT_NS_STEPS, EPS, _adjust_lr
from torch.optim.optimizer import _to_scalar

from .. import devices

log = logging.getLogger("accel")
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
NS_COEFFICIENTS = (DEFAULT_A, DEFAULT_B, DEFAULT_C)  # torch's Muon's
# bf16 already wins at lm-bytes' 192 x 768 on an AMX Xeon (1.4 ms against 2.4 ms in fp32), and a larger matrix's
# measurement adds to every run's start-up (on 2 cores 0.16 s at 512 x 512, 0.54 s at 1024 x 1024): not above this
MEASURED_UP_TO = 1 << 18
Shape = tuple[int, ...]


def choose_ns_dtypes(name: str, matrices: list[Tensor]) -> dict[Shape, torch.dtype]:
    """Each matrix shape's iteration dtype. `auto`: float32 where bf16 is emulated; bf16 on an accelerator (as
    torch's Muon); on a CPU with native bf16, whichever of the two measured faster at the shape, since bf16's
    conversions outweigh its matmuls on small matrices (64 x 192 on an AMX Xeon: 0.42 ms in bf16, 0.23 in fp32)."""
    shapes = sorted({tuple(m.shape) for m in matrices})
    if name != "auto":
        return dict.fromkeys(shapes, DTYPES[name])
    device = matrices[0].device
    if not devices.supports_bf16(device):
        log.info("muon: Newton-Schulz in float32 (bf16 is emulated on this %s)", device.type.upper())
        return dict.fromkeys(shapes, torch.float32)
    if device.type != "cpu":
        return dict.fromkeys(shapes, torch.bfloat16)
    chosen = _agreed({shape: faster_on_cpu(*sorted(shape), torch.get_num_threads()) for shape in shapes})
    for dtype in sorted(set(chosen.values()), key=str):
        sizes = ", ".join(f"{r} x {c}" for (r, c), d in chosen.items() if d == dtype)
        log.info("muon: Newton-Schulz in %s at %s (measured the faster on this CPU)", _NAMES[dtype], sizes)
    return chosen


def _agreed(chosen: dict[Shape, torch.dtype]) -> dict[Shape, torch.dtype]:
    """Rank 0's measurement on every rank of a distributed run: ranks orthogonalising in different dtypes would
    step their replicas apart."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return chosen
    box = [chosen]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@functools.cache
def faster_on_cpu(rows: int, cols: int, threads: int) -> torch.dtype:
    """bf16 or float32, whichever orthogonalises a rows x cols matrix sooner here (the best of three calls after
    one); bf16 unmeasured above MEASURED_UP_TO elements. Its own generator: the run's random stream is untouched."""
    if rows * cols > MEASURED_UP_TO:
        return torch.bfloat16
    update = torch.randn(rows, cols, generator=torch.Generator().manual_seed(0))
    best = {}
    for dtype in (torch.bfloat16, torch.float32):
        times = []
        for _ in range(4):
            start = time.perf_counter()
            orthogonalise(update, dtype, NS_COEFFICIENTS, DEFAULT_NS_STEPS, EPS)
            times.append(time.perf_counter() - start)
        best[dtype] = min(times[1:])
    return min(best, key=best.get)


def orthogonalise(update: Tensor, dtype: torch.dtype, coefficients: tuple[float, float, float], steps: int, eps: float):
    """torch's `_zeropower_via_newtonschulz` (same operations and order) in `dtype` instead of bf16."""
    a, b, c = coefficients
    # a copy always: `.to` returns the tensor itself when the dtype matches, and without Nesterov `update` is the
    # momentum buffer, which the in-place scaling below must not touch
    x = update.to(dtype, copy=True)
    tall = update.size(0) > update.size(1)
    if tall:
        x = x.T
    x.div_(x.norm().clamp(min=eps))  # spectral norm at most 1
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


class DtypeMuon(torch.optim.Muon):
    """torch.optim.Muon whose orthogonalisation runs in `ns_dtype`: one dtype, or one for each matrix shape."""

    def __init__(self, params: Any, ns_dtype: torch.dtype | Mapping[Shape, torch.dtype], **options: Any):
        super().__init__(params, **options)
        self.ns_dtype = ns_dtype

    def dtype_at(self, shape: Shape) -> torch.dtype:
        return self.ns_dtype[tuple(shape)] if isinstance(self.ns_dtype, Mapping) else self.ns_dtype

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = closure_loss(closure)
        for group in self.param_groups:
            params: list[Tensor] = []
            grads: list[Tensor] = []
            buffers: list[Tensor] = []
            self._init_group(group, params, grads, buffers)
            for param, grad, buffer in zip(params, grads, buffers):
                self._update(group, param, grad, buffer)
        return loss

    def _update(self, group: dict[str, Any], param: Tensor, grad: Tensor, buffer: Tensor) -> None:
        """torch's `_single_tensor_muon` for one matrix, orthogonalising in `ns_dtype`."""
        lr = _to_scalar(group["lr"])
        momentum = group["momentum"]
        buffer.lerp_(grad, 1 - momentum)
        update = grad.lerp(buffer, momentum) if group["nesterov"] else buffer
        update = orthogonalise(
            update, self.dtype_at(param.shape), group["ns_coefficients"], group["ns_steps"], group["eps"]
        )
        param.mul_(1 - lr * group["weight_decay"])
        param.add_(update, alpha=-_adjust_lr(lr, group["adjust_lr_fn"], param.shape))


def closure_loss(closure: Callable[[], Any] | None) -> Any:
    """The head of every torch optimizer's step: the closure, where one is given, recomputes the loss with
    gradients on (the step itself runs without them)."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()
