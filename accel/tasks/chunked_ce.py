"""Cross-entropy of a linear output layer computed in chunks of tokens, so the `[tokens, vocabulary]` logits never
exist at once: forward keeps one chunk's logits at a time and saves only each token's log-sum-exp; backward
recomputes each chunk's logits to make the gradients of the hidden states, the weight and the bias.

Peak memory holds one chunk's logits (a few copies of `chunk_tokens x vocabulary` floats) instead of the whole
batch's, for the price of a second matmul of the output layer in backward. The numbers are those of
`F.cross_entropy(F.linear(hidden, weight, bias), targets, ignore_index=..., label_smoothing=...)`, mean over the
scored tokens; under autocast the matmuls run in the autocast dtype and the log-sum-exp in float32, as there.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """The dtype autocast would give the output layer's matmul here: the autocast dtype where it is on."""
    device = tensor.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else tensor.dtype


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """One chunk's logits in float32, from operands already in the compute dtype."""
    return F.linear(hidden, weight, bias).float()


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """`(hidden [N, C], weight [V, C], bias [V] | None, targets [N])` -> the mean cross-entropy over the tokens
    whose target is not `ignore_index` (nan when none is scored, as F.cross_entropy gives)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, ignore_index, label_smoothing, chunk_tokens):
        dtype = _compute_dtype(hidden)
        with torch.autocast(hidden.device.type, enabled=False):
            w, b = weight.to(dtype), None if bias is None else bias.to(dtype)
            scored = targets != ignore_index
            safe = targets.masked_fill(~scored, 0)  # a valid index to gather at; the token is masked out after
            lses, total = [], torch.zeros((), dtype=torch.float32, device=hidden.device)
            for start in range(0, len(hidden), chunk_tokens):
                end = min(start + chunk_tokens, len(hidden))
                logits = _chunk_logits(hidden[start:end].to(dtype), w, b)
                lses.append(torch.logsumexp(logits, dim=-1))
                picked = logits.gather(1, safe[start:end, None]).squeeze(1)
                # label smoothing: (1 - e) * nll + e * (mean over classes of -log p) = lse - (1 - e) z_y - e mean(z)
                losses = lses[-1] - (1 - label_smoothing) * picked
                if label_smoothing:
                    losses = losses - label_smoothing * logits.mean(dim=-1)
                total = total + (losses * scored[start:end]).sum()
        lse, count = torch.cat(lses), scored.sum()
        ctx.save_for_backward(hidden, weight, bias, safe, scored, lse, count)
        ctx.dtype, ctx.label_smoothing, ctx.chunk_tokens = dtype, label_smoothing, chunk_tokens
        return total / count

    @staticmethod
    def backward(ctx, grad_loss):
        hidden, weight, bias, safe, scored, lse, count = ctx.saved_tensors
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        smoothing, vocab = ctx.label_smoothing, weight.shape[0]
        with torch.autocast(hidden.device.type, enabled=False):
            w, b = weight.to(ctx.dtype), None if bias is None else bias.to(ctx.dtype)
            row_scale = scored * (grad_loss.float() / count)  # d(mean loss)/d(token loss): 0 for ignored tokens
            grad_hidden = []
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_weight else None
            grad_bias = torch.zeros(vocab, dtype=torch.float32, device=weight.device) if want_bias else None
            for start in range(0, len(hidden), ctx.chunk_tokens):
                end = min(start + ctx.chunk_tokens, len(hidden))
                h = hidden[start:end].to(ctx.dtype)
                # d loss / d logits = softmax - (1 - e) onehot(y) - e / V, per scored token; in place, so a chunk
                # costs one [chunk, V] float32 buffer
                grad = _chunk_logits(h, w, b).sub_(lse[start:end, None]).exp_()
                grad.scatter_add_(1, safe[start:end, None], grad.new_full((end - start, 1), smoothing - 1))
                if smoothing:
                    grad.sub_(smoothing / vocab)
                grad = grad.mul_(row_scale[start:end, None]).to(ctx.dtype)
                if want_hidden:
                    grad_hidden.append((grad @ w).to(hidden.dtype))
                if want_weight:
                    grad_weight += (grad.t() @ h).float()
                if want_bias:
                    grad_bias += grad.float().sum(0)
        return (
            torch.cat(grad_hidden) if want_hidden else None,
            None if grad_weight is None else grad_weight.to(weight.dtype),
            None if grad_bias is None else grad_bias.to(bias.dtype),
            None,
            None,
            None,
            None,
        )


def chunked_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    chunk_tokens: int = 1024,
) -> torch.Tensor:
    """The mean cross-entropy of `F.linear(hidden, weight, bias)` against `targets` (any matching leading shape),
    `chunk_tokens` tokens' logits at a time."""
    return ChunkedLinearCrossEntropy.apply(
        hidden.reshape(-1, hidden.shape[-1]),
        weight,
        bias,
        targets.reshape(-1),
        ignore_index,
        label_smoothing,
        chunk_tokens,
    )


@torch.no_grad()
def chunked_eval_sums(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    ignore_index: int = -100,
    chunk_tokens: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The summed cross-entropy (float32) and the number of correct next-token guesses over the scored tokens,
    `chunk_tokens` tokens' logits at a time: evaluation batches are often larger than training ones."""
    hidden, targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
    correct = torch.zeros((), dtype=torch.float64, device=hidden.device)
    for start in range(0, len(hidden), chunk_tokens):
        logits = F.linear(hidden[start : start + chunk_tokens], weight, bias).float()
        chunk_targets = targets[start : start + chunk_tokens]
        loss += F.cross_entropy(logits, chunk_targets, ignore_index=ignore_index, reduction="sum")
        correct += ((logits.argmax(-1) == chunk_targets) & (chunk_targets != ignore_index)).sum()
    return loss, correct
