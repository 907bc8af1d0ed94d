"""int8 variants of the ONNX graph, made and run by onnxruntime.

Why onnxruntime and not torch: torch.ao.quantization is deprecated upstream (torch 2.14 warns that it will be
removed) and its PT2E successor moved to torchao; onnxruntime.quantization is maintained, and quantizing the
graph a user ships measures the int8 model in the runtime that serves it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from ..quiet import quiet_logs
from .errors import QuantizeError

log = logging.getLogger("accel")
# nn.Linear exports as Gemm or MatMul, nn.LSTM/GRU as LSTM/GRU: the layers dynamic int8 is meant for
DYNAMIC_OPS = ("MatMul", "Gemm", "LSTM", "GRU", "Attention")
STATIC_NEEDS = ("Conv",)


def quantize(mode: str, source: Path, target: Path, calibration: Iterable[torch.Tensor] = ()) -> dict:
    """Write the int8 `mode` variant of the ONNX model `source` to `target`; returns the mode and the int8 op counts."""
    import onnx

    model = onnx.load(str(source))
    ops = {node.op_type for node in model.graph.node}
    # the dynamo exporter records shapes of initializers too; onnxruntime transposes Gemm weights in place and
    # then fails its own shape check against them, so the (recomputable) value_info goes
    del model.graph.value_info[:]
    if mode == "dynamic-int8":
        _dynamic(model, target, ops)
    elif mode == "static-int8":
        _static(model, target, ops, calibration)
    else:
        raise QuantizeError(f"Unknown quantization mode `{mode}`; use dynamic-int8 or static-int8.")
    return {"mode": mode, "int8_ops": int8_ops(target)}


def int8_ops(path: Path) -> dict[str, int]:
    """Node counts by op type of the int8 computations in an ONNX file: integer kernels (dynamic mode) and ops fed
    by DequantizeLinear (QDQ static mode, which onnxruntime fuses into int8 kernels when it loads the graph)."""
    import onnx

    nodes = onnx.load(str(path)).graph.node
    dequantized = {out for node in nodes if node.op_type == "DequantizeLinear" for out in node.output}
    counts: dict[str, int] = {}
    for node in nodes:
        integer = "Integer" in node.op_type or node.op_type.startswith(("QLinear", "DynamicQuantizeLSTM"))
        fed = node.op_type not in ("QuantizeLinear", "DequantizeLinear") and dequantized.intersection(node.input)
        if integer or fed:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def _dynamic(model, target: Path, ops: set[str]) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    targets = ops.intersection(DYNAMIC_OPS)
    if not targets:
        raise QuantizeError(
            f"dynamic-int8 quantizes Linear/LSTM layers ({', '.join(DYNAMIC_OPS)} nodes), and this "
            f"model has none (its ops: {', '.join(sorted(ops))}). For a CNN use "
            "`--quantize static-int8`."
        )
    with quiet_logs("", level=logging.ERROR):  # ORT advises through the root logger
        # all of DYNAMIC_OPS, not just those present: onnxruntime rewrites Gemm as MatMul before quantizing
        quantize_dynamic(model, str(target), op_types_to_quantize=list(DYNAMIC_OPS), weight_type=QuantType.QInt8)
    if not int8_ops(target):
        raise QuantizeError(
            f"dynamic-int8 found {', '.join(sorted(targets))} nodes but onnxruntime quantized none "
            "of them (their weights may not be constants). Try `--quantize static-int8`."
        )


def _static(model, target: Path, ops: set[str], calibration: Iterable[torch.Tensor]) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    if not ops.intersection(STATIC_NEEDS):
        raise QuantizeError(
            f"static-int8 is for CNNs and this model has no Conv layer (its ops: "
            f"{', '.join(sorted(ops))}). For Linear/LSTM layers use `--quantize dynamic-int8`."
        )
    batches = list(calibration)
    if not batches:
        raise QuantizeError("static-int8 needs calibration batches, and the training loader gave none.")
    reader = _CalibrationReader(model.graph.input[0].name, batches)
    with quiet_logs("", level=logging.ERROR):  # ORT advises through the root logger
        # QDQ with per-channel int8 weights and uint8 activations: the format ORT's CPU kernels fuse best
        quantize_static(
            model,
            str(target),
            reader,
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
    log.info("static-int8 calibrated on %d training batches", reader.batches)


class _CalibrationReader:
    """Feeds image batches to onnxruntime's calibrator, counting them (a CalibrationDataReader by its
    `get_next`, which is all onnxruntime checks: importing onnxruntime here would make it a hard dependency)."""

    def __init__(self, input_name: str, batches: Iterable[torch.Tensor]):
        self.input_name = input_name
        self._batches: Iterator[torch.Tensor] = iter(batches)
        self.batches = 0

    def get_next(self) -> dict | None:
        images = next(self._batches, None)
        if images is None:
            return None
        self.batches += 1
        return {self.input_name: images.contiguous().numpy()}
