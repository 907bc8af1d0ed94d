"""Language modelling: next-token prediction over `(inputs, targets)` token batches, targets shifted by one.

With `fused_loss` the model hands over its hidden states and output layer (accel/tasks/lm_head.py) and the loss
is computed without the `[B, T, vocabulary]` logits: by liger-kernel's Triton kernel on CUDA where it is
installed, else in chunks of tokens (accel/tasks/chunked_ce.py).
"""

from __future__ import annotations

import importlib.util
import logging
import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from ..errors import AccelError
from ..registry import TASKS
from ..schema import StrictModel
from .base import Task, logits_of
from .chunked_ce import chunked_eval_sums, chunked_linear_cross_entropy
from .lm_head import hidden_and_head

log = logging.getLogger("accel")
CHUNK_LOGITS = 2**24  # logits per chunk when chunk_tokens is not set: 64 MB of float32, whatever the vocabulary
IGNORE = -100  # the target value that is not scored (padding), as in torch and Hugging Face


@TASKS.register("language_model")
class LanguageModel(Task):
    """`model(inputs)` gives logits `[B, T, V]` for token ids `[B, T]`; the loss is the mean cross-entropy of
    each position's next token. Evaluation: val_loss (nats per token), perplexity, bits per token and
    next-token accuracy, averaged over tokens."""

    name = "language_model"

    class Config(StrictModel):
        name: Literal["language_model"] = "language_model"
        accuracy: bool = Field(True, description="also report next-token accuracy in evaluation")
        fused_loss: bool = Field(
            False,
            description="compute the output layer and the cross-entropy together, never holding the [batch, "
            "context, vocabulary] logits: peak memory stops growing with the vocabulary. The model hands over its "
            "hidden states (accel's gpt, Hugging Face causal LMs; docs/tasks.md). liger-kernel's Triton kernel "
            "on CUDA where installed (`accel[liger]`), else chunks of `chunk_tokens` tokens",
        )
        chunk_tokens: int | None = Field(
            None,
            ge=1,
            description="tokens whose logits the chunked fused loss holds at once (memory: chunk_tokens x "
            "vocabulary floats, a few times); null: as many as make 2^24 logits (64 MB of float32: 512 tokens "
            "at a 32,768-token vocabulary). Smaller saves memory, larger runs fewer, bigger matmuls",
        )

    @classmethod
    def reported_metrics(cls, cfg: Config) -> frozenset[str]:
        plain = {"val_loss", "val_perplexity", "val_bits_per_token"}
        return frozenset(plain | ({"val_accuracy"} if cfg.accuracy else set()))

    @classmethod
    def from_config(cls, cfg: Config, loss: nn.Module) -> LanguageModel:
        return cls(
            label_smoothing=getattr(loss, "label_smoothing", 0.0),
            accuracy=cfg.accuracy,
            fused_loss=cfg.fused_loss,
            chunk_tokens=cfg.chunk_tokens,
        )

    def __init__(
        self,
        label_smoothing: float = 0.0,
        accuracy: bool = True,
        fused_loss: bool = False,
        chunk_tokens: int | None = None,
    ):
        self.label_smoothing, self.accuracy = label_smoothing, accuracy
        self.fused_loss, self.chunk_tokens = fused_loss, chunk_tokens
        self._liger = importlib.util.find_spec("liger_kernel") is not None  # looked up once: not in a traced step
        self._announced: set[str] = set()

    def loss(self, model: Any, batch: Any) -> torch.Tensor:
        inputs, targets = batch
        # accel's FLOP counter calls a function over the module's weights, not the module: it counts the plain loss,
        # the model's FLOPs (MFU counts no recomputation, and the fused loss recomputes the logits in backward)
        if self.fused_loss and isinstance(model, nn.Module):
            return self._fused_loss(model, inputs, targets)
        logits = _scores_per_target(logits_of(model(inputs)), targets)
        return F.cross_entropy(
            logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE, label_smoothing=self.label_smoothing
        )

    def _fused_loss(self, model: Any, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        hidden, head = hidden_and_head(model, inputs)
        hidden, targets = hidden.flatten(0, -2), targets.flatten()
        if hidden.is_cuda and self._liger:
            from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

            self._announce("liger-kernel's fused linear cross-entropy (Triton)")
            return liger_fused_linear_cross_entropy(
                hidden, head.weight, targets, head.bias, ignore_index=IGNORE, label_smoothing=self.label_smoothing
            )
        chunk = self._chunk(head)
        self._announce(f"the chunked PyTorch cross-entropy, {chunk} tokens a chunk")
        smoothing = self.label_smoothing
        return chunked_linear_cross_entropy(hidden, head.weight, head.bias, targets, IGNORE, smoothing, chunk)

    def _chunk(self, head: nn.Linear) -> int:
        return self.chunk_tokens or max(1, CHUNK_LOGITS // head.out_features)

    def _announce(self, backend: str) -> None:
        """Say once which fused loss runs; not while dynamo traces (a log call would break the graph), so a
        whole-step compiled run says it at the FLOP count or the first evaluation, which run eagerly."""
        if not torch.compiler.is_compiling() and backend not in self._announced:
            self._announced.add(backend)
            log.info("language_model: fused loss: %s", backend)

    def samples(self, batch: Any) -> int:
        return len(batch[1])

    def tokens(self, batch: Any) -> int:
        return batch[1].numel()

    def eval_sums(self, model: Any, batch: Any) -> dict[str, torch.Tensor]:
        inputs, targets = batch
        if self.fused_loss:
            hidden, head = hidden_and_head(model, inputs)
            targets = targets.flatten()
            loss, correct = chunked_eval_sums(hidden, head.weight, head.bias, targets, IGNORE, self._chunk(head))
        else:
            logits = _scores_per_target(logits_of(model(inputs)), targets).flatten(0, -2).float()
            targets = targets.flatten()
            loss = F.cross_entropy(logits, targets, ignore_index=IGNORE, reduction="sum")
            correct = ((logits.argmax(-1) == targets) & (targets != IGNORE)).sum() if self.accuracy else None
        sums = {"loss": loss, "tokens": (targets != IGNORE).sum().double()}
        if self.accuracy:
            sums["accuracy"] = correct.double()
        return sums

    def metrics(self, totals: dict[str, float]) -> dict[str, float]:
        tokens = max(totals["tokens"], 1)
        loss = totals["loss"] / tokens
        metrics = {
            "val_loss": loss,
            "val_perplexity": math.exp(min(loss, 700.0)),
            "val_bits_per_token": loss / math.log(2),
        }
        if "accuracy" in totals:
            metrics["val_accuracy"] = totals["accuracy"] / tokens
        return metrics


def _scores_per_target(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The logits, checked to hold one row of scores per target token: torch's own error for a mismatch is a
    batch-size complaint from deep inside cross_entropy."""
    if logits.shape[:-1] != targets.shape:
        last = logits.dim() == 3 and logits.shape[1] == 1 and targets.dim() == 2 and targets.shape[1] > 1
        why = (
            " The model returned the last position's logits only (nanoGPT's forward does so without targets, "
            "for generation): return every position's logits in training, e.g. by calling the output layer on "
            "all positions when the model is in training mode, or use task: model_loss with a forward that "
            "takes the targets and returns its loss."
            if last
            else ""
        )
        raise AccelError(
            f"task language_model: the model returned logits of shape {list(logits.shape)} for targets of shape "
            f"{list(targets.shape)}; it needs [*targets' shape, vocabulary], scores for every target token.{why}"
        )
    return logits
