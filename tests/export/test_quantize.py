"""int8 variants by onnxruntime: what each mode quantizes, what it costs in logits, and the modes a model
cannot take."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from accel.export import ExportConfig, export_run
from accel.export.errors import QuantizeError
from accel.export.formats import export_model, ort_runner
from accel.export.quantize import int8_ops, quantize
from accel.export.source import load_source


@pytest.fixture(scope="module")
def exported(tiny_run, tmp_path_factory):
    """(source, fp32 ONNX path, validation images) for the tiny run."""
    source = load_source(tiny_run)
    path = tmp_path_factory.mktemp("q") / "model.onnx"
    export_model(source.servable(), source.example, "onnx", path)
    images = torch.cat([images for images, _ in source.val_loader])
    return source, path, images


def _agreement(int8_logits, fp32_logits) -> tuple[float, float]:
    """(max |difference| relative to the logits' spread, fraction of equal argmax)."""
    spread = float(fp32_logits.max() - fp32_logits.min())
    diff = float((int8_logits - fp32_logits).abs().max()) / spread
    return diff, float((int8_logits.argmax(1) == fp32_logits.argmax(1)).float().mean())


@pytest.mark.slow
def test_dynamic_int8_quantizes_the_linear_layer_only(exported, tmp_path):
    source, fp32, images = exported
    info = quantize("dynamic-int8", fp32, tmp_path / "d.onnx")
    assert info["int8_ops"] == {"MatMulInteger": 1}  # the Linear head; the convolutions stay fp32
    int8, reference = ort_runner(tmp_path / "d.onnx", 1)(images), ort_runner(fp32, 1)(images)
    diff, same = _agreement(int8, reference)
    assert 0 < diff < 0.05 and same >= 0.9  # changed, as int8 must, but not by much


def test_static_int8_calibrates_on_training_batches_and_quantizes_the_convolutions(exported, tmp_path):
    source, fp32, images = exported
    batches = [images for images, _ in itertools.islice(source.train_loader, 3)]
    info = quantize("static-int8", fp32, tmp_path / "s.onnx", batches)
    assert info["int8_ops"]["Conv"] == 3 and info["int8_ops"]["Gemm"] == 1
    int8, reference = ort_runner(tmp_path / "s.onnx", 1)(images), ort_runner(fp32, 1)(images)
    diff, same = _agreement(int8, reference)
    assert 0 < diff < 0.1 and same >= 0.9
    with pytest.raises(QuantizeError, match="calibration batches"):
        quantize("static-int8", fp32, tmp_path / "none.onnx", [])


def _graph(tmp_path, op: str):
    """A one-node ONNX model: a Conv (no Linear) or a Gemm (no Conv), with constant weights."""
    if op == "Conv":
        weight, shape_in, shape_out = np.ones((2, 1, 3, 3), np.float32), [1, 1, 5, 5], [1, 2, 3, 3]
        node = helper.make_node("Conv", ["x", "w"], ["y"])
    else:
        weight, shape_in, shape_out = np.ones((4, 3), np.float32), [1, 4], [1, 3]
        node = helper.make_node("Gemm", ["x", "w"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape_in)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape_out)],
        [numpy_helper.from_array(weight, "w")],
    )
    path = tmp_path / f"{op}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_modes_a_model_cannot_take_are_refused_with_the_mode_it_can(tmp_path):
    with pytest.raises(QuantizeError, match=r"has none \(its ops: Conv\).*static-int8"):
        quantize("dynamic-int8", _graph(tmp_path, "Conv"), tmp_path / "d.onnx")
    with pytest.raises(QuantizeError, match=r"no Conv layer.*dynamic-int8"):
        quantize("static-int8", _graph(tmp_path, "Gemm"), tmp_path / "s.onnx", [torch.zeros(1, 4)])
    with pytest.raises(QuantizeError, match="Unknown quantization mode"):
        quantize("int4", _graph(tmp_path, "Gemm"), tmp_path / "x.onnx")
    assert not (tmp_path / "d.onnx").exists() and not (tmp_path / "s.onnx").exists()


def test_quantize_needs_the_onnx_format(tiny_run):
    with pytest.raises(QuantizeError, match="needs `--format onnx`"):
        export_run(tiny_run, ExportConfig(format="torchscript", quantize=["dynamic-int8"]))


def test_int8_ops_counts_integer_kernels_and_dequantized_inputs(tmp_path):
    nodes = [
        helper.make_node("DequantizeLinear", ["q", "s"], ["x"]),
        helper.make_node("Conv", ["x", "w"], ["y"]),
        helper.make_node("MatMulInteger", ["a", "b"], ["c"]),
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    graph = helper.make_graph(nodes, "g", [], [])
    onnx.save(helper.make_model(graph), str(tmp_path / "m.onnx"))
    assert int8_ops(tmp_path / "m.onnx") == {"Conv": 1, "MatMulInteger": 1}
