"""Ship a trained run: ONNX / TorchScript / torch.export files, int8 and pruned variants, each measured.

`export_run(RUN_DIR, ExportConfig(...))` writes the files and export.json (sizes, validation accuracy against the
original, logit agreement, batch-1 and large-batch latency); `accel export` is the same from the command line.
"""

from .config import ExportConfig
from .errors import ExportError, QuantizeError, UnsupportedOpError
from .pipeline import default_out, export_run
from .report import render_table

__all__ = [
    "ExportConfig",
    "ExportError",
    "QuantizeError",
    "UnsupportedOpError",
    "default_out",
    "export_run",
    "render_table",
]
