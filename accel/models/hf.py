"""Hugging Face causal language models built from a config, randomly initialised: nothing is downloaded.
Needs the `hf` extra (the `transformers` package)."""
from __future__ import annotations

from typing import Any

from torch import nn

from ..errors import AccelError
from ..registry import MODELS


@MODELS.register("hf_causal_lm")
def hf_causal_lm(vocab_size: int, context: int, model_type: str = "gpt2", **config: Any) -> nn.Module:
    """`AutoModelForCausalLM.from_config` for `model_type` (gpt2, llama, ...) with the dataset's vocabulary and
    context; `config` sets the rest (`n_layer`, `hidden_size`, ...). Its forward returns an object holding
    `logits` (task language_model), and `loss` when given `labels` (task model_loss, dict batches)."""
    try:
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        raise AccelError("model `hf_causal_lm` needs the transformers package: pip install 'accel[hf]'") from None
    try:
        cfg = AutoConfig.for_model(model_type, vocab_size=vocab_size, max_position_embeddings=context,
                                   bos_token_id=None, eos_token_id=None, **config)
    except (ValueError, KeyError) as err:
        raise AccelError(f"model `hf_causal_lm`: {err}") from None
    return AutoModelForCausalLM.from_config(cfg)
