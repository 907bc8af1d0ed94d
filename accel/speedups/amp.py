"""`amp`: mixed precision. bf16 autocast anywhere it is supported; fp16 autocast with a GradScaler on CUDA.

The speed-up only chooses: the Precision it builds (accel.strategy.precision) is what the strategy runs the step with.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .. import devices
from ..strategy.precision import Autocast, Precision, ScaledFp16
from .base import Candidate, Context, Phase, Speedup, SpeedupConfig, registered


@registered("amp")
class Amp(Speedup):
    """Mixed precision: bf16 autocast (CPU and recent GPUs) or fp16 autocast with a GradScaler (CUDA)."""

    class Config(SpeedupConfig):
        dtype: Literal["bf16", "fp16"] = Field(
            "bf16",
            description="bf16: same range as fp32, no loss scaling needed, runs on CPUs with native bf16 "
            "too (1.7x fp32 for ResNet-18 on an AVX512-BF16 CPU, docs/benchmarks.md). fp16: needs a GradScaler, "
            "which accel supports on CUDA only.",
        )
        init_scale: float = Field(2.0**16, gt=0, description="fp16 only: the GradScaler's starting loss scale.")
        growth_interval: int = Field(
            2000, ge=1, description="fp16 only: steps without inf/NaN gradients before the loss scale doubles."
        )

    phase = Phase.PRECISION
    tune = (Candidate({"dtype": "bf16"}), Candidate({"dtype": "fp16"}))

    def __init__(self, cfg: Config | None = None):
        super().__init__(cfg)
        cfg = self.cfg
        self._precision = (
            ScaledFp16(cfg.init_scale, cfg.growth_interval) if cfg.dtype == "fp16" else Autocast(cfg.dtype)
        )

    def conflict(self, context: Context) -> str | None:
        fp16, device = self.cfg.dtype == "fp16", context.device
        if fp16 and context.strategy == "fsdp":
            return "the GradScaler has not been verified on sharded gradients here; use `dtype: bf16`"
        if fp16 and context.strategy == "xla":
            return (
                "fp16 needs a GradScaler, which steps the optimizer itself and so cannot hand the step to "
                "torch_xla's xm.optimizer_step (which all-reduces the replicas' gradients); accel supports it on "
                "CUDA only. XLA devices train in bf16 natively: use `dtype: bf16`"
            )
        if fp16 and not devices.supports_fp16_scaler(device):
            return (
                f"fp16 needs a GradScaler, which accel supports on CUDA only (device here: {device.type}); "
                "use `dtype: bf16`"
            )
        if not fp16 and not devices.supports_bf16(device):
            if device.type == "cpu":
                return (
                    "this CPU has no native bf16 (AVX512-BF16 or AMX): torch would emulate it, many times "
                    "slower than fp32, so fp32 it is"
                )
            return f"bf16 autocast is not supported on {devices.device_name(device)}; use `dtype: fp16` on CUDA"
        return None

    def precision(self) -> Precision:
        return self._precision

    def metrics(self) -> dict[str, Any]:
        return self._precision.metrics()

    def state_dict(self) -> dict[str, Any]:  # the GradScaler's state, under checkpoint["speedups"]["amp"]
        return self._precision.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._precision.load_state_dict(state)
