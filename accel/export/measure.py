"""The numbers of an export: file sizes, validation accuracy and logit agreement, latency."""

from __future__ import annotations

import gzip
import io
import statistics
import time
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..tasks.language_model import IGNORE
from .formats import Runner

Batch = tuple[torch.Tensor, torch.Tensor]
SETTLE_S = 0.02


def file_size(path: Path) -> dict[str, int]:
    """Bytes on disk, and gzipped (where unstructured zeros from pruning show up)."""
    return _sizes(Path(path).read_bytes())


def state_dict_size(module: nn.Module) -> dict[str, int]:
    """What the eager model's weights take as a torch.save file."""
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    return _sizes(buffer.getvalue())


def _sizes(data: bytes) -> dict[str, int]:
    return {"size_bytes": len(data), "gzip_bytes": len(gzip.compress(data, compresslevel=6))}


@dataclass
class Evaluation:
    """A runner's logits on the validation set and the accuracy they give."""

    logits: torch.Tensor
    accuracy: float

    def max_abs_diff(self, other: Evaluation) -> float:
        """Largest |logit difference| over every sample and class."""
        return float((self.logits.float() - other.logits.float()).abs().max())


def evaluate(run: Runner, batches: Iterable[Batch]) -> Evaluation:
    """Run the validation batches through `run`; accuracy is top-1 (per position for a language model), as the
    trainer's evaluation counts it."""
    logits, targets = [], []
    for images, labels in batches:
        logits.append(run(images).detach().float().cpu())
        targets.append(labels)
    logits_t, targets_t = torch.cat(logits), torch.cat(targets)
    counted = targets_t != IGNORE  # a language model's padding positions count for nothing
    accuracy = ((logits_t.argmax(-1) == targets_t) & counted).sum().item() / max(int(counted.sum()), 1)
    return Evaluation(logits_t, accuracy)


def latency(
    runners: dict[str, Runner], inputs: dict[str, torch.Tensor], runs: int, warmup: int, rounds: int = 5
) -> dict[str, dict[str, dict[str, float]]]:
    """Per runner and input: median, p10 and p90 milliseconds of `runs` timed calls after `warmup` untimed ones.

    The runs are split into `rounds` blocks and the runners take turns block by block (A B C A B C ...), so a
    machine that slows down during the measurement affects all alike. Not call by call: onnxruntime's and
    OpenMP's worker threads spin for a while after each call, and alternating calls measured mostly each
    runtime fighting the other's spinning threads (80 ms instead of 0.3 ms on the 2-core build machine).
    """
    result: dict[str, dict[str, dict[str, float]]] = {name: {} for name in runners}
    for label, images in inputs.items():
        times: dict[str, list[float]] = {name: [] for name in runners}
        for run in runners.values():
            for _ in range(warmup):
                run(images)
        for block in _blocks(runs, rounds):
            for name, run in runners.items():
                time.sleep(SETTLE_S)  # let the previous runtime's threads go idle
                run(images)  # untimed: first call after the switch pays for cold caches
                times[name] += _timed(run, images, block)
        for name, samples in times.items():
            result[name][label] = summarize(samples, len(images))
    return result


def _blocks(runs: int, rounds: int) -> list[int]:
    """`runs` split into at most `rounds` nearly equal blocks."""
    rounds = max(1, min(rounds, runs))
    return [runs // rounds + (i < runs % rounds) for i in range(rounds)]


def _timed(run: Runner, images: torch.Tensor, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        start = time.perf_counter()
        run(images)
        out.append((time.perf_counter() - start) * 1e3)
    return out


def summarize(ms: list[float], batch: int) -> dict[str, float]:
    """Median and spread of per-call milliseconds, and the samples/s the median gives."""
    ordered = sorted(ms)
    median = statistics.median(ordered)
    return {
        "median_ms": median,
        "p10_ms": _nearest_rank(ordered, 0.1),
        "p90_ms": _nearest_rank(ordered, 0.9),
        "runs": len(ordered),
        "samples_per_s": batch / (median / 1e3) if median > 0 else float("inf"),
    }


def _nearest_rank(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextmanager
def torch_threads(threads: int):
    """PyTorch's intra-op thread count for the block (onnxruntime gets the same number), then restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def tile(images: torch.Tensor, size: int) -> torch.Tensor:
    """A batch of exactly `size` real images, repeating them when there are fewer."""
    repeats = -(-size // len(images))
    return images.repeat(repeats, *[1] * (images.dim() - 1))[:size].contiguous()
