"""What `accel export` does, as one validated config (the CLI fills it from its flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from ..schema import StrictModel
from .errors import ExportError

Format = Literal["onnx", "torchscript", "exported"]
QuantizeMode = Literal["dynamic-int8", "static-int8"]


class ExportConfig(StrictModel):
    """Options of one export; every figure it produces lands in `export.json`."""

    format: Format = Field(
        "onnx",
        description="onnx (dynamo exporter, run in onnxruntime) | torchscript "
        "(torch.jit.trace) | exported (torch.export, a .pt2 file)",
    )
    quantize: list[QuantizeMode] = Field(
        default_factory=list,
        description="int8 variants to add, made by "
        "onnxruntime.quantization from the ONNX graph: dynamic-int8 (Linear/LSTM "
        "weights) and/or static-int8 (CNNs; calibrated on training batches)",
    )
    prune: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="fraction of all Conv/Linear weights to zero by global magnitude, made permanent before export",
    )
    finetune_steps: int = Field(
        0,
        ge=0,
        description="optimizer steps of fine-tuning after pruning, with the "
        "recipe's data, optimizer and schedule (pruned weights stay 0)",
    )
    calibration_batches: int = Field(8, ge=1, description="training batches fed to static-int8 calibration")
    out: Path | None = Field(None, description="output directory; default RUN_DIR/export/<format>[-prune<amount>]")
    batch_size: int = Field(256, ge=2, description="the large batch of the batch-prediction latency")
    runs: int = Field(50, ge=1, description="timed runs per variant and batch size (the median is reported)")
    warmup: int = Field(10, ge=0, description="untimed runs per variant and batch size before timing")
    threads: int | None = Field(
        None, ge=1, description="intra-op threads for PyTorch and onnxruntime alike; default: torch.get_num_threads()"
    )
    atol: float = Field(
        1e-4,
        gt=0,
        description="largest allowed |logit difference| between the fp32 export and "
        "the eager model on the validation set",
    )
    val_batches: int | None = Field(None, ge=1, description="validation batches to compare on; default: all")

    @field_validator("quantize")
    @classmethod
    def _once_each(cls, modes: list[str]) -> list[str]:
        return list(dict.fromkeys(modes))  # a mode given twice is one variant, not two with the same name

    @model_validator(mode="after")
    def _finetune_needs_prune(self) -> ExportConfig:
        if self.finetune_steps and self.prune is None:
            raise ValueError("--finetune-steps fine-tunes a pruned model; give --prune (e.g. 0.3) too")
        return self

    @classmethod
    def from_options(cls, **options) -> ExportConfig:
        """Validate options given by keyword (CLI flags), with a readable error instead of a traceback."""
        try:
            return cls(**{key: value for key, value in options.items() if value is not None})
        except ValidationError as err:
            problems = "; ".join(
                f"`{'.'.join(map(str, e['loc']))}` = {e.get('input')!r}: {e['msg']}"
                if e["loc"]
                else e["msg"].removeprefix("Value error, ")
                for e in err.errors()
            )
            raise ExportError(f"Invalid export options: {problems}.") from None
