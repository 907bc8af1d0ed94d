"""Global magnitude pruning: the smallest weights across layers go to zero for good, and fine-tuning keeps them
there while it trains the rest."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accel.export.errors import ExportError
from accel.export.prune import finetune, prunable, prune_global, sparsity
from accel.export.source import load_source
from accel.models import small_cnn


def test_global_pruning_zeroes_the_smallest_weights_across_layers_permanently():
    torch.manual_seed(0)
    model = small_cnn(num_classes=4, in_channels=1, width=4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pruned, masks = prune_global(model, 0.3)
    stats = sparsity(pruned)
    assert stats["sparsity"] == pytest.approx(0.3, abs=1 / stats["weights"])
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the original is untouched
    assert pruned.state_dict().keys() == before.keys()  # permanent: no weight_orig / weight_mask left
    assert not any(m._forward_pre_hooks for _, m in prunable(pruned))
    weights = [(before[f"{name}.weight"], layer.weight.detach()) for name, layer in prunable(pruned)]
    dropped = torch.cat([old[new == 0].abs() for old, new in weights])
    kept = torch.cat([old[new != 0].abs() for old, new in weights])
    assert dropped.max() <= kept.min()  # by magnitude over all layers at once, not layer by layer
    per_layer = [float((new == 0).float().mean()) for _, new in weights]
    assert max(per_layer) - min(per_layer) > 0.05  # ... so layers lose different shares
    assert all(torch.equal(masks[name], (layer.weight != 0).float()) for name, layer in prunable(pruned))


def test_pruning_needs_conv_or_linear_layers():
    with pytest.raises(ExportError, match="Conv or Linear"):
        prune_global(nn.Sequential(nn.Flatten()), 0.3)


def test_finetuning_trains_the_kept_weights_and_keeps_pruned_ones_at_zero(tiny_run):
    source = load_source(tiny_run)
    pruned, masks = prune_global(source.model, 0.5)
    tuned, info = finetune(source, pruned, masks, steps=3)
    assert info["steps"] == 3 and info["train_loss"] > 0
    assert tuned.state_dict().keys() == pruned.state_dict().keys()
    for (name, before), (_, after) in zip(prunable(pruned), prunable(tuned)):
        assert torch.equal(after.weight == 0, before.weight == 0), name
        assert not torch.equal(after.weight, before.weight), name  # the rest did train
