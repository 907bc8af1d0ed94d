"""One export end to end: load the run, prune, export, quantize, measure every variant, write export.json."""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..extras import require
from ..io import check_creatable
from ..measure import load
from ..runs.rundir import check_results_out
from .config import ExportConfig
from .errors import ExportError, QuantizeError
from .formats import RUNTIME, SUFFIX, Runner, eager_runner, export_model, load_runner, ort_runner
from .measure import evaluate, file_size, latency, state_dict_size, tile, torch_threads
from .prune import finetune, prune_global, sparsity
from .quantize import quantize
from .report import build_report, write_report
from .source import Source, load_source

log = logging.getLogger("accel")


@dataclass
class Variant:
    """One model to measure: how to run it, its file, and which variant its logits are compared against."""

    name: str
    runtime: str
    run: Runner = field(repr=False)
    size: dict[str, int]
    file: Path | None = None
    reference: str | None = None  # the variant it was made from; None for the original
    info: dict[str, Any] = field(default_factory=dict)


def export_run(path: str | Path, config: ExportConfig | None = None) -> dict[str, Any]:
    """Export the run at `path` (run directory or checkpoint) as `config` says; returns export.json's content.

    Raises ExportError after writing export.json when the fp32 export's logits differ from the eager model's
    by more than `config.atol`.
    """
    config = config or ExportConfig()
    if config.format == "onnx":
        require("`accel export --format onnx` (the default)", "onnx", "onnxscript", "onnxruntime")
    if config.quantize and config.format != "onnx":
        raise QuantizeError(
            f"--quantize makes int8 ONNX graphs run by onnxruntime; it needs `--format onnx`, "
            f"not `--format {config.format}`."
        )
    if config.out is not None:  # an explicit --out: never a file, a run or a bench (the default is the run's own)
        check_results_out(config.out, "export")
    source = load_source(path)
    out = config.out or default_out(source.run_dir, config)
    check_creatable(out)  # the default too: a run directory may be read-only
    out.mkdir(parents=True, exist_ok=True)
    before = _stamps(out)
    try:
        report, evaluations = _export(source, config, out)
    except KeyboardInterrupt:  # the files written so far are unchecked, perhaps half written: they go, and
        # export.json says so (never an older one beside them)
        removed = _remove_written(out, before)
        write_report(interrupted_report(source, config, out, removed), out)
        raise
    write_report(report, out)
    if report["validation"]["note"]:
        log.warning("%s", report["validation"]["note"])
    if not report["verified"]:
        raise ExportError(_unverified(report, config, evaluations, out / "export.json"))
    return report


def interrupted_report(source: Source, config: ExportConfig, out: Path, removed: list[str]) -> dict[str, Any]:
    files = sorted(p.name for p in out.iterdir() if p.is_file() and p.name != "export.json")
    return {
        "interrupted": True,
        "verified": False,
        "source": str(source.run_dir),
        "format": config.format,
        "out": str(out),
        "files": files,
        "removed": removed,
        "note": "interrupted before the export was checked against the eager model and measured: nothing was "
        "exported, and the files it had begun to write were removed; run `accel export` again",
    }


def _stamps(out: Path) -> dict[str, tuple[int, int]]:
    """Each file's (modification time, size) before the export writes: what it wrote is new or changed."""
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in out.iterdir() if p.is_file()}


def _remove_written(out: Path, before: dict[str, tuple[int, int]]) -> list[str]:
    """Remove the files the export wrote or began to write; files it never touched stay."""
    written = [name for name, stamp in _stamps(out).items() if name != "export.json" and stamp != before.get(name)]
    for name in written:
        (out / name).unlink(missing_ok=True)
    return sorted(written)


def _export(source: Source, config: ExportConfig, out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The variants made, checked and timed: export.json's content, and each variant's evaluation."""
    threads = config.threads or torch.get_num_threads()
    variants, extras = _variants(source, config, out, threads)
    inputs = _latency_inputs(source, config.batch_size)
    with torch_threads(threads):
        # the loader again for each variant, not a list of every batch: validation sets can be large
        evaluations = {
            v.name: evaluate(v.run, itertools.islice(source.val_loader, config.val_batches)) for v in variants
        }
        log.info(
            "timing %d variants: %d runs after %d warm-up runs per batch size, %d threads",
            len(variants),
            config.runs,
            config.warmup,
            threads,
        )
        with load.watched() as machine:  # others' load swings the latencies: 165-276 ms against 0.75 ms was seen
            latencies = latency({v.name: v.run for v in variants}, inputs, config.runs, config.warmup)
    extras = {**extras, "threads": threads, "out": str(out)}
    return build_report(source, config, variants, evaluations, latencies, extras, machine), evaluations


def _unverified(report: dict[str, Any], config: ExportConfig, evaluations: dict, written: Path) -> str:
    """Why the export failed its check, with advice only where it can help: no --atol is wide enough for NaN."""
    checked = report["verification"]
    diff = checked["max_abs_diff"]
    if math.isfinite(diff):
        return (
            f"The {config.format} export's logits differ from PyTorch's by up to {diff:.3g} on the validation set, "
            f"more than --atol {config.atol:g} (see {written}). Try another --format, or raise --atol if that is "
            "acceptable."
        )
    if not torch.isfinite(evaluations[checked["compared_with"]].logits).all():
        return (
            "The model's own logits hold NaN or infinity on the validation set (the weights of a run that "
            f"diverged), so its {config.format} export predicts nothing and cannot be checked (see {written}). "
            "Train again with a lower learning rate or gradient clipping (train.clip_grad_norm), or export an "
            "earlier checkpoint of the run (an epoch-NNN.pt, with checkpoint.keep) if it kept one."
        )
    return (
        f"The {config.format} export's logits hold NaN or infinity on the validation set where PyTorch's are "
        f"finite (see {written}). Try another --format."
    )


def _latency_inputs(source: Source, batch_size: int) -> dict[str, torch.Tensor]:
    """One real validation image (online prediction) and `batch_size` of them (batch prediction)."""
    images, count = [], 0
    for batch, _ in source.val_loader:
        images.append(batch)
        count += len(batch)
        if count >= batch_size:
            break
    return {"batch_1": tile(images[0], 1), f"batch_{batch_size}": tile(torch.cat(images), batch_size)}


def default_out(run_dir: Path, config: ExportConfig) -> Path:
    """RUN_DIR/export/<format>[-prune<amount>]: exports of one run with different options do not collide."""
    return run_dir / "export" / (config.format + (f"-prune{config.prune:g}" if config.prune else ""))


def _variants(source: Source, config: ExportConfig, out: Path, threads: int) -> tuple[list[Variant], dict]:
    """The original, the pruned model (if asked), the export, and its int8 variants, each ready to run."""
    original = source.servable()
    variants = [Variant("eager", "pytorch", eager_runner(original), state_dict_size(original))]
    extras: dict[str, Any] = {}
    model = source.model
    if config.prune:
        model, extras["prune"] = _prune(source, config)
        pruned = source.servable(model)
        variants.append(
            Variant("eager-pruned", "pytorch", eager_runner(pruned), state_dict_size(pruned), reference="eager")
        )
    artifact = out / f"model{SUFFIX[config.format]}"
    log.info("exporting to %s", artifact)
    info = export_model(source.servable(model), source.example, config.format, artifact, source.input_name)
    variants.append(
        Variant(
            config.format,
            RUNTIME[config.format],
            load_runner(config.format, artifact, threads),
            file_size(artifact),
            artifact,
            reference=variants[-1].name,
            info=info,
        )
    )
    if config.quantize:
        log.info(
            "int8 by onnxruntime.quantization (torch.ao.quantization is deprecated upstream in torch %s)",
            torch.__version__,
        )
    for mode in config.quantize:
        target = out / f"model.{mode}.onnx"
        calibration = _calibration(source, config.calibration_batches) if mode == "static-int8" else ()
        info = quantize(mode, artifact, target, calibration)
        # compared with the fp32 graph it was made from: the difference is what int8 costs
        variants.append(
            Variant(
                f"onnx-{mode}",
                "onnxruntime",
                ort_runner(target, threads),
                file_size(target),
                target,
                reference=config.format,
                info=info,
            )
        )
    return variants, extras


def _prune(source: Source, config: ExportConfig) -> tuple[torch.nn.Module, dict[str, Any]]:
    model, masks = prune_global(source.model, config.prune)
    info: dict[str, Any] = {
        "amount": config.prune,
        "method": "global L1 magnitude over Conv/Linear weights",
        "finetune": None,
    }
    if config.finetune_steps:
        model, info["finetune"] = finetune(source, model, masks, config.finetune_steps)
    info.update(sparsity(model))
    log.info("pruned %.1f%% of %d Conv/Linear weights", 100 * info["sparsity"], info["weights"])
    return model, info


def _calibration(source: Source, batches: int) -> list[torch.Tensor]:
    """A few training batches, as the loader yields them (the exported graph normalises them itself)."""
    return [images for images, _ in itertools.islice(source.train_loader, batches)]
