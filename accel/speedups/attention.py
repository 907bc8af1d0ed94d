"""`attention`: which scaled-dot-product-attention kernel runs, through `torch.nn.attention.sdpa_kernel`.

Models that call `torch.nn.functional.scaled_dot_product_attention` (accel's `gpt`, most of torchvision's and
Hugging Face's transformers) get the chosen kernel in training and evaluation. A Hugging Face model is also
switched to its `sdpa` attention implementation, so it calls that function at all.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field
from torch.nn.attention import SDPBackend, sdpa_kernel

from .base import Candidate, Context, Phase, Speedup, SpeedupConfig, registered

if TYPE_CHECKING:
    from ..strategy.slots import Slots

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
CUDA_ONLY = {"efficient", "cudnn"}  # torch's CPU kernels: flash (fused) and math
HALF_ONLY_ON_CUDA = {"flash", "cudnn"}


def attention_context(backend: str) -> AbstractContextManager:
    """Only `backend` may run scaled_dot_product_attention inside the context (an error where it cannot)."""
    return sdpa_kernel([BACKENDS[backend]])


@registered("attention")
class Attention(Speedup):
    """The attention kernel: flash, memory-efficient, cuDNN or the math reference, via sdpa_kernel."""

    class Config(SpeedupConfig):
        backend: Literal["flash", "efficient", "cudnn", "math"] = Field(
            "flash",
            description="flash: fused, O(T) memory (CUDA sm80+ fp16/bf16, and CPU); efficient: "
            "memory-efficient (CUDA, any dtype); cudnn: cuDNN's fused kernel (CUDA, H100 fastest); math: the "
            "unfused reference, O(T^2) memory",
        )

    phase = Phase.KERNELS
    needs = "has_attention"
    tune = (Candidate({"backend": "flash"}), Candidate({"backend": "efficient"}), Candidate({"backend": "cudnn"}))

    def __init__(self, cfg: Config | None = None):
        super().__init__(cfg)
        self._hf_before: tuple[Any, str] | None = None

    def conflict(self, context: Context) -> str | None:
        device = context.device
        if self.cfg.backend in CUDA_ONLY and device.type != "cuda":
            return f"the {self.cfg.backend} attention kernel needs CUDA (device here: {device.type})"
        fp32 = context.precision == "fp32"
        if device.type == "cuda" and self.cfg.backend in HALF_ONLY_ON_CUDA and fp32:
            return (
                f"the {self.cfg.backend} attention kernel runs fp16/bf16 only on CUDA, and without amp the "
                "inputs are fp32: enable amp, or choose backend efficient or math"
            )
        return None

    def setup(self, engine: "Slots") -> None:
        config = getattr(engine.module, "config", None)
        switch = getattr(engine.module, "set_attn_implementation", None)
        if switch is not None and getattr(config, "_attn_implementation", "sdpa") != "sdpa":
            self._hf_before = (switch, config._attn_implementation)
            switch("sdpa")

    def step_context(self) -> AbstractContextManager:  # evaluation runs inside the step contexts too
        return attention_context(self.cfg.backend)

    def teardown(self) -> None:
        if self._hf_before is not None:
            switch, implementation = self._hf_before
            switch(implementation)
            self._hf_before = None
