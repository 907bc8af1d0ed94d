"""`accel export`: a trained run as ONNX, TorchScript or torch.export, measured against eager."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add(commands) -> None:
    parser = commands.add_parser(
        "export",
        help="export a trained run (ONNX, TorchScript, torch.export; int8, "
        "pruned) and measure size, accuracy and latency",
    )
    parser.add_argument("source", help="run directory (from `accel train --out`) or a checkpoint file in one")
    parser.add_argument("--format", default="onnx", choices=["onnx", "torchscript", "exported"])
    parser.add_argument(
        "--quantize",
        action="append",
        default=[],
        choices=["dynamic-int8", "static-int8"],
        help="add an int8 ONNX variant made by onnxruntime (repeatable; needs --format onnx)",
    )
    parser.add_argument(
        "--prune",
        type=float,
        metavar="AMOUNT",
        help="zero this fraction of Conv/Linear weights by global magnitude before export, e.g. 0.3",
    )
    parser.add_argument("--finetune-steps", type=int, help="fine-tune the pruned model for N recipe steps")
    parser.add_argument("--out", type=Path, help="output folder (default: SOURCE/export/FORMAT[-pruneAMOUNT])")
    for flag, text in (
        ("--batch-size", "large batch for batch-prediction latency (default 256)"),
        ("--runs", "timed calls per variant and batch size (default 50)"),
        ("--warmup", "untimed calls before them (default 10)"),
        ("--threads", "intra-op threads for PyTorch and onnxruntime (default: torch's)"),
        ("--calibration-batches", "training batches for static-int8 calibration (default 8)"),
        ("--val-batches", "validation batches to compare on (default: all)"),
    ):
        parser.add_argument(flag, type=int, help=text)
    parser.add_argument("--atol", type=float, help="allowed max |logit difference| of the fp32 export (1e-4)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..export import ExportConfig, export_run, render_table
    from ..runs.signals import abort_on_signals

    options = {key: value for key, value in vars(args).items() if key not in ("command", "source", "argv", "run")}
    try:
        with abort_on_signals():  # Ctrl-C, SIGTERM, SIGHUP: stop, and say what is left
            report = export_run(args.source, ExportConfig.from_options(**options))
    except KeyboardInterrupt:
        print(
            "interrupted: nothing exported (an output folder already made holds an export.json that says so)",
            file=sys.stderr,
        )
        return 130
    print(render_table(report))
    print(Path(report["out"]) / "export.json")
    return 0
