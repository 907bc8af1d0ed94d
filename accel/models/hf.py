"""Hugging Face models: built from a config, randomly initialised, or with `pretrained: DIR` loaded from a local
directory that `save_pretrained` wrote (`local_files_only`: nothing is downloaded; safetensors where present).
Needs the `hf` extra (the `transformers` package)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import AccelError
from ..extras import import_or_explain
from ..registry import MODELS

log = logging.getLogger("accel")


def _transformers(builder: str) -> Any:
    return import_or_explain("transformers", f"model `{builder}`")


@MODELS.register("hf_causal_lm")
def hf_causal_lm(
    vocab_size: int, context: int, model_type: str = "gpt2", pretrained: str | None = None, **config: Any
) -> nn.Module:
    """`AutoModelForCausalLM.from_config` for `model_type` (gpt2, llama, ...) with the dataset's vocabulary and
    context; `config` sets the rest (`n_layer`, `hidden_size`, ...). `pretrained: DIR` loads a saved model instead
    (`config` overrides its settings). Its forward returns an object holding `logits` (task language_model), and
    `loss` when given `labels` (task model_loss, dict batches)."""
    transformers = _transformers("hf_causal_lm")
    if pretrained is not None:
        model = _from_pretrained("hf_causal_lm", transformers.AutoModelForCausalLM, pretrained, config)
        _check_fits(model, pretrained, vocab_size, context)
        return model
    try:
        cfg = transformers.AutoConfig.for_model(
            model_type,
            vocab_size=vocab_size,
            max_position_embeddings=context,
            bos_token_id=None,
            eos_token_id=None,
            **config,
        )
    except (ValueError, KeyError) as err:
        raise AccelError(f"model `hf_causal_lm`: {err}") from None
    return transformers.AutoModelForCausalLM.from_config(cfg)


@MODELS.register("hf_sequence_classifier")
def hf_sequence_classifier(
    num_classes: int, model_type: str = "bert", pretrained: str | None = None, **config: Any
) -> nn.Module:
    """`AutoModelForSequenceClassification` with `num_labels` = the dataset's classes: from a config of
    `model_type` (bert, gpt2, ...), or `pretrained: DIR` (a saved encoder or classifier; a classifier head of
    another size is re-initialised). Batches are dicts (`input_ids`, `attention_mask`, `labels`) and the model
    returns its own loss: task model_loss."""
    transformers = _transformers("hf_sequence_classifier")
    auto = transformers.AutoModelForSequenceClassification
    if pretrained is None:
        try:
            cfg = transformers.AutoConfig.for_model(model_type, num_labels=num_classes, **config)
        except (ValueError, KeyError) as err:
            raise AccelError(f"model `hf_sequence_classifier`: {err}") from None
        return auto.from_config(cfg)
    saved = _from_pretrained("hf_sequence_classifier", transformers.AutoConfig, pretrained, {})
    model = _from_pretrained(
        "hf_sequence_classifier",
        auto,
        pretrained,
        {"num_labels": num_classes, "ignore_mismatched_sizes": True, **config},
    )
    if (
        any(name.endswith("ForSequenceClassification") for name in saved.architectures or ())
        and saved.num_labels != num_classes
    ):
        log.info("head re-initialised: %d -> %d classes (%s)", saved.num_labels, num_classes, pretrained)
    return model


def _from_pretrained(builder: str, auto: Any, directory: str, options: dict[str, Any]) -> Any:
    """`auto.from_pretrained` on a local directory only, in float32 unless `options` says otherwise (transformers
    would otherwise keep the saved dtype, and accel's mixed precision wants float32 weights)."""
    path = Path(directory)
    if not (path / "config.json").is_file():
        why = "does not exist" if not path.exists() else "has no config.json"
        raise AccelError(
            f"model `{builder}`: pretrained directory {path} {why}. Name a directory that "
            "`model.save_pretrained(DIR)` wrote (config.json and model.safetensors); nothing is "
            "downloaded."
        )
    defaults = {} if auto.__name__ == "AutoConfig" else {"dtype": torch.float32}
    try:
        return auto.from_pretrained(path, local_files_only=True, **{**defaults, **options})
    except (OSError, ValueError, KeyError) as err:
        raise AccelError(f"model `{builder}`: cannot load {path}: {err}") from None


def _check_fits(model: nn.Module, directory: str, vocab_size: int, context: int) -> None:
    """Token ids beyond the model's vocabulary, or windows longer than its positions, fail deep inside the
    forward (an index error, a device assert): say so up front."""
    config = model.config
    size, positions = getattr(config, "vocab_size", None), getattr(config, "max_position_embeddings", None)
    if size is not None and vocab_size > size:
        raise AccelError(
            f"model `hf_causal_lm`: the data has token ids up to {vocab_size - 1}, but the model in "
            f"{directory} has a vocabulary of {size}. Tokenise the data with the model's own tokenizer."
        )
    if positions is not None and context > positions:
        raise AccelError(
            f"model `hf_causal_lm`: the data's context is {context} tokens, but the model in "
            f"{directory} takes at most {positions}. Set the dataset's `context` to {positions} or less."
        )
