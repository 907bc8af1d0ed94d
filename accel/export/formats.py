"""The three export formats: write a module to a file, and load the file back as a runner (images -> logits)."""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..quiet import quiet_logs
from .errors import ExportError, UnsupportedOpError

log = logging.getLogger("accel")
Runner = Callable[[torch.Tensor], torch.Tensor]
SUFFIX = {"onnx": ".onnx", "torchscript": ".pt", "exported": ".pt2"}
RUNTIME = {"onnx": "onnxruntime", "torchscript": "torchscript", "exported": "torch.export"}
# what an export failure suggests instead; never torchscript, deprecated upstream. torch.export failing is for the
# model's code to fix: the ONNX exporter traces through torch.export too
ALTERNATIVES = {"onnx": ["exported"], "torchscript": ["exported", "onnx"], "exported": []}
EXPORT_FIX = "make the step exportable (torch.cond for a data-dependent branch, torch._check for a size)"
# what the ONNX exporter says when no translation exists for an op
_NO_ONNX_FUNCTION = re.compile(r"No ONNX function found for <OpOverload\(op='([\w.:]+)', overload='(\w+)'\)>")
_NODE_TARGET = re.compile(r"target=torch\.ops\.([\w.]+)")


def export_model(
    module: nn.Module, example: torch.Tensor, fmt: str, path: Path, input_name: str = "images"
) -> dict[str, Any]:
    """Write `module` (eval mode, taking `example`-like batches of any size) to `path`; returns format facts.
    `input_name` names the ONNX graph's input."""
    exporters = {
        "onnx": partial(_export_onnx, input_name=input_name),
        "torchscript": _export_torchscript,
        "exported": _export_exported,
    }
    try:
        return exporters[fmt](module, example, path)
    except ExportError:
        raise
    except Exception as err:  # the exporters' own errors; the cause stays chained for library users
        raise _explain(err, fmt) from err


def _batch_dim() -> tuple[dict[int, Any]]:
    # positional, so it fits any forward's argument name (images, idx, input_ids)
    return ({0: torch.export.Dim("batch")},)


def _export_onnx(module: nn.Module, example: torch.Tensor, path: Path, input_name: str) -> dict[str, Any]:
    with quiet_logs("onnxscript", "onnx_ir"):  # per-pass optimizer notes at INFO
        program = torch.onnx.export(
            module,
            (example,),
            dynamo=True,
            input_names=[input_name],
            output_names=["logits"],
            dynamic_shapes=_batch_dim(),
            verbose=False,
        )
    for node in program.model.graph:
        # source file paths and lines of the exporting machine: nothing a shipped model should carry
        node.metadata_props.pop("pkg.torch.onnx.stack_trace", None)
    program.save(str(path))
    opset = program.model_proto.opset_import
    return {
        "exporter": "torch.onnx.export(dynamo=True)",
        "opset": next((o.version for o in opset if o.domain in ("", "ai.onnx")), None),
    }


def _export_torchscript(module: nn.Module, example: torch.Tensor, path: Path) -> dict[str, Any]:
    log.info(
        "torch.jit (TorchScript) is deprecated upstream (torch %s warns on trace); `--format exported` is "
        "its successor",
        torch.__version__,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # said once above, not once per traced method
        traced = torch.jit.trace(module, example)
    traced.save(str(path))
    return {"exporter": "torch.jit.trace"}


def _export_exported(module: nn.Module, example: torch.Tensor, path: Path) -> dict[str, Any]:
    program = torch.export.export(module, (example,), dynamic_shapes=_batch_dim())
    torch.export.save(program, str(path))
    return {"exporter": "torch.export.export"}


def _explain(err: Exception, fmt: str) -> ExportError:
    """A person-readable error: the op that has no translation when it can be found, else the exporter's summary."""
    text = "\n".join(str(e) for e in _chain(err))
    found = _NO_ONNX_FUNCTION.search(text)
    if found:
        return UnsupportedOpError(f"{found.group(1)}.{found.group(2)}", fmt, ALTERNATIVES[fmt])
    node = _NODE_TARGET.search(text) if "translating node" in text else None
    if node:
        return UnsupportedOpError(node.group(1), fmt, ALTERNATIVES[fmt])
    summary = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
    others = " or ".join(f"`--format {alt}`" for alt in ALTERNATIVES[fmt]) or EXPORT_FIX
    return ExportError(f"{fmt} export failed ({type(err).__name__}): {summary[:500]} Try {others}.")


def _chain(err: BaseException | None):
    while err is not None:
        yield err
        err = err.__cause__ or err.__context__


def load_runner(fmt: str, path: Path, threads: int) -> Runner:
    """Load an exported file as `images -> logits`, run by the runtime a user of that format ships with."""
    if fmt == "onnx":
        return ort_runner(path, threads)
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the deprecation was logged at export
            return eager_runner(torch.jit.load(str(path), map_location="cpu").eval())
    return eager_runner(torch.export.load(str(path)).module())


def eager_runner(module: nn.Module) -> Runner:
    """PyTorch inference: the module under inference_mode."""

    def run(images: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return module(images)

    return run


def ort_runner(path: Path, threads: int) -> Runner:
    """An onnxruntime CPU session with `threads` intra-op threads (inter-op 1, as PyTorch eager runs ops)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: ORT's warnings about unused initializers are noise here
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def run(images: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run(None, {name: images.numpy()})[0])

    return run
