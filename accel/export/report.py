"""export.json and the table printed after an export."""

from __future__ import annotations

import importlib.metadata
import platform
from pathlib import Path
from typing import Any

import torch

from ..io import strict_json, write_atomic
from ..measure.load import busy
from ..runs.rundir import RunDir

PACKAGES = ("torch", "onnx", "onnxruntime", "onnxscript")


def build_report(
    source, config, variants, evaluations, latencies, extras: dict[str, Any], machine: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Everything export.json holds: where the model came from, what the graph takes, and per variant its size,
    validation accuracy, agreement with the model it was made from, and latency, with the machine's load while
    the latencies were measured (`machine`, accel.measure.load's record)."""
    original = evaluations["eager"]
    rows = [_row(v, evaluations, latencies, original, variants[0].size["size_bytes"]) for v in variants]
    checked = next(row for row in rows if row["name"] == config.format)
    verification = {
        "variant": checked["name"],
        "compared_with": checked["compared_with"],
        "max_abs_diff": checked["max_abs_diff"],
        "atol": config.atol,
        "same_accuracy": checked["val_accuracy"] == evaluations[checked["compared_with"]].accuracy,
    }
    verification["passed"] = verification["max_abs_diff"] <= config.atol
    return {
        "source": {
            "run_dir": str(source.run_dir),
            "checkpoint": str(source.checkpoint),
            "recipe": source.recipe.name,
            "model": source.recipe.model.name,
            "weights": source.weights,
        },
        "format": config.format,
        "options": config.model_dump(mode="json"),
        "out": extras["out"],
        "input": source.input_spec(),
        "output": {"name": "logits", "shape": ["batch", *original.logits.shape[1:]]},
        "prune": extras.get("prune"),
        "validation": {"samples": len(original.logits), **_trained_accuracy(source)},
        "timing": {
            "threads": extras["threads"],
            "runs": config.runs,
            "warmup": config.warmup,
            "batch_sizes": [1, config.batch_size],
            "statistic": "median of per-call wall time",
            "order": "after warm-up, variants take turns in 5 blocks of runs",
            "device": "cpu",
            "load": machine or None,
            "busy": busy_note(machine),
        },
        "variants": rows,
        "verification": verification,
        "verified": verification["passed"],
        "versions": _versions(),
    }


def _row(variant, evaluations, latencies, original, original_bytes: int) -> dict[str, Any]:
    evaluation = evaluations[variant.name]
    reference = evaluations[variant.reference] if variant.reference else evaluation
    return {
        "name": variant.name,
        "runtime": variant.runtime,
        "file": variant.file.name if variant.file else None,
        **variant.size,
        "size_vs_eager": variant.size["size_bytes"] / original_bytes,
        "val_accuracy": evaluation.accuracy,
        "accuracy_delta": evaluation.accuracy - original.accuracy,
        "compared_with": variant.reference,
        "max_abs_diff": evaluation.max_abs_diff(reference),
        "latency": latencies[variant.name],
        "details": variant.info or None,
    }


def _trained_accuracy(source) -> dict[str, Any]:
    """val_accuracy from the run's summary.json, which the eager figure here must equal (same data, same model),
    when the checkpoint holds the weights it was measured on: not so for a run that stopped before its end."""
    said = RunDir(source.run_dir, create=False).read_summary()  # None when missing or unreadable (with a warning)
    if said is None:
        return {"accuracy_reported_by_training": None, "note": None}
    status = said.status
    if status == "diverged":  # resuming would continue from the weights that diverged: no advice to resume
        return {
            "accuracy_reported_by_training": None,
            "note": f"the run diverged: {source.checkpoint.name} holds the last weights it kept, not those of "
            "its last evaluation, so training's val_accuracy is not compared with the export's",
        }
    if status != "completed":
        return {
            "accuracy_reported_by_training": None,
            "note": f"the run is {status}: {source.checkpoint.name} holds the weights of the step it stopped at, "
            "not those of its last evaluation, so training's val_accuracy is not compared with the "
            "export's. Resume the run to its end for that comparison",
        }
    return {
        "accuracy_reported_by_training": said.metrics.get("val_accuracy"),
        "note": None,
    }


def busy_note(machine: dict[str, Any] | None) -> str | None:
    """What the latency table must say when others took a share of the cores while it was measured (accel.measure.load's
    rule, as the bench and the profile apply it); None on a quiet machine."""
    if not busy(machine):
        return None
    return (
        f"The machine was busy while the latencies were measured: other processes took {machine['others_share']:.0%} "
        f"of the {machine['cores']} core(s) this process may use (load average {machine['load_avg_1m']:.1f}), so "
        "the latencies, and the ratios between variants, are not to be trusted. Stop the other work and export again."
    )


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version(), "machine": platform.machine()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    found["torch_threads_default"] = str(torch.get_num_threads())
    return found


def write_report(report: dict[str, Any], out: Path) -> Path:
    """export.json in `out`, written whole or not at all."""
    return write_atomic(out / "export.json", strict_json(report, indent=2) + "\n")  # a diverged model's NaN: null


def render_table(report: dict[str, Any]) -> str:
    """A Markdown table of the variants: size, accuracy, agreement and latency (median, p10-p90)."""
    big = f"batch_{report['timing']['batch_sizes'][1]}"
    lines = [
        f"| variant | runtime | size | val accuracy | Δ accuracy | max abs Δ logits | batch 1 ms | "
        f"{big.replace('_', ' ')} ms | {big.replace('_', ' ')} images/s |",
        "|" + " --- |" * 9,
    ]
    for row in report["variants"]:
        one, many = row["latency"]["batch_1"], row["latency"][big]
        versus = f" (vs {row['compared_with']})" if row["compared_with"] else ""
        lines.append(
            f"| {row['name']} | {row['runtime']} | {row['size_bytes'] / 1024:.1f} KiB | "
            f"{row['val_accuracy']:.4f} | {row['accuracy_delta']:+.4f} | {row['max_abs_diff']:.2e}{versus} | "
            f"{_ms(one)} | {_ms(many)} | {many['samples_per_s']:.0f} |"
        )
    note = report["timing"].get("busy")  # an export.json from before the load was recorded has none
    return "\n".join(lines + ([f"\nNote: {note}"] if note else []))


def _ms(stats: dict[str, float]) -> str:
    return f"{stats['median_ms']:.3f} ({stats['p10_ms']:.3f}–{stats['p90_ms']:.3f})"
