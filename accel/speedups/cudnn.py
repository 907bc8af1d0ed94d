"""`cudnn`: cuDNN autotuning, TF32 and fp32 matmul precision. Process-global flags, restored on teardown."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field, model_validator

from .base import Phase, Speedup, SpeedupConfig, registered

if TYPE_CHECKING:
    from ..strategy.slots import Slots

log = logging.getLogger("accel")
backends = torch.backends


def _attr(obj: Any, name: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    return (lambda: getattr(obj, name)), (lambda value: setattr(obj, name, value))


# name -> (get, set), in the order setup writes them; teardown writes them back in reverse.
FLAGS: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {
    "cudnn.benchmark": _attr(backends.cudnn, "benchmark"),
    "cudnn.deterministic": _attr(backends.cudnn, "deterministic"),
    "cudnn.allow_tf32": _attr(backends.cudnn, "allow_tf32"),
    # The matmul half of TF32 goes through this one setter only: it sets every backend's matmul precision
    # consistently, where mixing it with torch.backends.cuda.matmul.allow_tf32 can leave torch refusing to
    # report the precision at all (torch 2.14), which breaks anything that asks, inductor included.
    "float32_matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
}
# torch >= 2.9 keeps the matmul settings in per-backend fields. Restoring through the legacy setters above
# writes "ieee" where a field said "none" (inherit: the same maths), so those few are written back directly.
# Only those: writing these fields otherwise marks the legacy and new APIs as mixed, and torch then refuses
# to read float32_matmul_precision.
PRECISION_LEAVES = {
    f"{name}.matmul.fp32_precision": _attr(getattr(backends, name).matmul, "fp32_precision")
    for name in ("cuda", "mkldnn")
    if hasattr(getattr(getattr(backends, name, None), "matmul", None), "fp32_precision")
}


def requested_flags(cfg: "Cudnn.Config") -> dict[str, Any]:
    """The global flag values `cfg` asks for, keyed like FLAGS."""
    return {
        "cudnn.benchmark": (not cfg.deterministic) if cfg.benchmark is None else cfg.benchmark,
        "cudnn.deterministic": cfg.deterministic,
        "cudnn.allow_tf32": cfg.allow_tf32,
        "float32_matmul_precision": cfg.float32_matmul_precision or ("high" if cfg.allow_tf32 else "highest"),
    }


def read_flags() -> dict[str, Any]:
    """Every global flag this module may change, with its current value."""
    return {name: get() for name, (get, _) in {**FLAGS, **PRECISION_LEAVES}.items()}


def apply_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """Set `flags` (keys of FLAGS); return the previous values of everything, for `restore_flags`."""
    previous = read_flags()
    for name, (_, put) in FLAGS.items():
        if name in flags:
            put(flags[name])
    return previous


def restore_flags(previous: dict[str, Any]) -> None:
    """Undo `apply_flags`: write back every saved value, most derived last."""
    for name, (_, put) in reversed(FLAGS.items()):
        put(previous[name])
    for name, (get, put) in PRECISION_LEAVES.items():
        if get() != previous[name]:
            put(previous[name])


@registered("cudnn")
class Cudnn(Speedup):
    """cuDNN autotuning, TF32 and fp32 matmul precision (CUDA; matmul precision also applies on CPU)."""

    class Config(SpeedupConfig):
        benchmark: bool | None = Field(
            None,
            description="Time several convolution algorithms for each new input shape and keep the fastest. "
            "Pays off with fixed shapes; costs time whenever shapes change, and the pick can differ run to run. "
            "Unset: on unless `deterministic`.",
        )
        deterministic: bool = Field(
            False,
            description="Only deterministic cuDNN algorithms, so reruns give identical results; often "
            "slower. Covers cuDNN only (for every op see torch.use_deterministic_algorithms).",
        )
        allow_tf32: bool = Field(
            True,
            description="TF32 tensor cores (Ampere and later) for fp32 convolutions and matmuls: 10 mantissa "
            "bits instead of 23, several times faster. false forces full fp32.",
        )
        float32_matmul_precision: Literal["highest", "high", "medium"] | None = Field(
            None,
            description="Overrides the matmul half of allow_tf32: highest = full fp32, high = TF32, medium = "
            "bf16 where the hardware has it (on CPUs with AMX too, through oneDNN). Unset: follow allow_tf32.",
        )

        @model_validator(mode="after")
        def _speed_or_reproducibility(self) -> "Cudnn.Config":
            if self.benchmark and self.deterministic:
                raise ValueError(
                    "`benchmark: true` and `deterministic: true` conflict: benchmark picks the fastest algorithm by "
                    "timing it, so the pick (and the result) can change between runs, which deterministic forbids. "
                    "Choose speed (benchmark: true, deterministic: false) or reproducibility (deterministic: true "
                    "and benchmark unset or false)"
                )
            return self

    phase = Phase.FLAGS  # global flags first: later speed-ups (compile) see them

    def __init__(self, cfg: Config | None = None):
        super().__init__(cfg)
        self._previous: dict[str, Any] | None = None

    def setup(self, engine: "Slots") -> None:
        if engine.device.type != "cuda":
            log.info(
                "cudnn: on %s only `float32_matmul_precision` has an effect; cuDNN and TF32 flags need CUDA",
                engine.device.type,
            )
        if self._previous is None:  # a second fit() must not save our own values as the ones to restore
            self._previous = apply_flags(requested_flags(self.cfg))

    def teardown(self) -> None:
        if self._previous is not None:
            restore_flags(self._previous)
            self._previous = None
