"""Each format writes a file that loads back and reproduces the eager logits for any batch size; exporter
failures name the op and suggest another format."""

from __future__ import annotations

import logging
import warnings

import onnx
import pytest
import torch

from accel.export.errors import ExportError, UnsupportedOpError
from accel.export.formats import _explain, eager_runner, export_model, load_runner
from accel.export.source import load_source


@torch.library.custom_op("accel_test::wiggle", mutates_args=())
def wiggle(x: torch.Tensor) -> torch.Tensor:
    """An op with a kernel and a shape function but no ONNX translation."""
    return x * 2


@wiggle.register_fake
def _(x):
    return torch.empty_like(x)


class Wiggly(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.linear(wiggle(images))


@pytest.fixture(scope="module")
def source(tiny_run):
    return load_source(tiny_run)


@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "exported"])
def test_export_reloads_and_matches_eager_for_any_batch_size(source, fmt, tmp_path, caplog):
    classifier = source.servable()
    path = tmp_path / f"model.{fmt}"
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # deprecations are logged once, never leaked as warnings
        with caplog.at_level(logging.INFO, logger="accel"):
            info = export_model(classifier, source.example, fmt, path)
        run = load_runner(fmt, path, threads=1)
    images = torch.cat([images for images, _ in source.val_loader])
    for size in (1, 3, len(images)):  # traced with a batch of 2: the batch axis must stay free
        torch.testing.assert_close(run(images[:size]), eager_runner(classifier)(images[:size]), atol=1e-5, rtol=0)
    deprecation = [r for r in caplog.records if "deprecated upstream" in r.getMessage()]
    assert len(deprecation) == (fmt == "torchscript")
    if fmt == "onnx":  # one export checked twice: each ONNX export costs seconds here
        check_onnx_graph(path, info)


def check_onnx_graph(path, info):
    """uint8 `images` with a named dynamic batch axis in, `logits` out; no source paths in the file."""
    graph = onnx.load(str(path)).graph
    (images,), (logits,) = graph.input, graph.output
    assert images.name == "images" and logits.name == "logits" and info["opset"] >= 18
    assert images.type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert images.type.tensor_type.shape.dim[0].dim_param == "batch"
    assert not any(p.key == "pkg.torch.onnx.stack_trace" for node in graph.node for p in node.metadata_props)


def test_op_without_onnx_translation_is_named_with_a_working_alternative(tmp_path):
    model, example = Wiggly().eval(), torch.randn(2, 4)
    with pytest.raises(UnsupportedOpError) as caught:
        export_model(model, example, "onnx", tmp_path / "m.onnx")
    assert caught.value.op == "accel_test.wiggle.default"
    assert "`accel_test.wiggle.default`" in str(caught.value) and "`--format exported`" in str(caught.value)
    export_model(model, example, "exported", tmp_path / "m.pt2")  # the suggestion holds
    torch.testing.assert_close(load_runner("exported", tmp_path / "m.pt2", 1)(example), model(example))


def test_other_exporter_failures_keep_the_summary_and_suggest_formats():
    err = _explain(RuntimeError("Could not guard on data-dependent expression\nlong details"), "exported")
    assert isinstance(err, ExportError) and not isinstance(err, UnsupportedOpError)
    assert "data-dependent expression" in str(err) and "long details" not in str(err)
    assert "torch.cond" in str(err) and "torchscript" not in str(err)  # deprecated upstream: never suggested
    onnx = _explain(RuntimeError("Could not guard on data-dependent expression"), "onnx")
    assert "`--format exported`" in str(onnx) and "torchscript" not in str(onnx)
