"""Muon with its Newton-Schulz orthogonalisation in a chosen dtype (`optim.ns_dtype`, docs/optimizers.md).

torch's Muon orthogonalises in bf16, hard-coded (torch/optim/_muon.py, `grad.bfloat16()`). Where bf16 is
emulated (an AVX2-only CPU) that iteration costs ~25x its fp32 run and dominates the step, so `auto` runs it in
float32 there. torch offers no seam for the dtype (`_single_tensor_muon` calls its module's own function), so
`DtypeMuon.step` repeats torch's per-matrix update with that one change; with bfloat16 it equals torch's Muon
(tests/optimizers/test_optim_muon.py). Its state and groups are torch's Muon's, so checkpoints are unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim._muon import _adjust_lr
from torch.optim.optimizer import _to_scalar

from .. import devices

log = logging.getLogger("accel")
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def choose_ns_dtype(name: str, device: torch.device) -> torch.dtype:
    """`auto`: bf16 where the device computes it natively (as torch's Muon does), float32 where it is emulated."""
    if name == "auto":
        name = "bfloat16" if devices.supports_bf16(device) else "float32"
        why = "native" if name == "bfloat16" else "emulated"
        log.info("muon: Newton-Schulz in %s (bf16 is %s on this %s)", name, why, device.type.upper())
    return DTYPES[name]


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
    """torch.optim.Muon whose orthogonalisation runs in `ns_dtype`."""

    def __init__(self, params: Any, ns_dtype: torch.dtype, **options: Any):
        super().__init__(params, **options)
        self.ns_dtype = ns_dtype

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
        update = orthogonalise(update, self.ns_dtype, group["ns_coefficients"], group["ns_steps"], group["eps"])
        param.mul_(1 - lr * group["weight_decay"])
        param.add_(update, alpha=-_adjust_lr(lr, group["adjust_lr_fn"], param.shape))


def closure_loss(closure: Callable[[], Any] | None) -> Any:
    """The head of every torch optimizer's step: the closure, where one is given, recomputes the loss with
    gradients on (the step itself runs without them)."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()
