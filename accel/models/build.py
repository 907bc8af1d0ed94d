"""A recipe's `model:` section and the model it names: accel's own (small vision models, a GPT), `torchvision:NAME`,
`timm:NAME`, Hugging Face builders, or any `package.module:callable`.

A builder receives what the data says about the model's shape, for each keyword it names: `num_classes`,
`in_channels` (images), `vocab_size`, `context` (token sequences); `model.args` adds or overrides options.
`model.weights` then loads a local state dict into the built model.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from torch import nn

from ..errors import AccelError, did_you_mean
from ..registry import MODELS, import_attribute
from ..schema import StrictModel
from . import gpt, hf, vision  # noqa: F401  (register their builders; transformers is imported only when one is built)
from .libraries import is_library_model, library_model
from .weights import WeightsConfig, load_weights


class ModelConfig(StrictModel):
    name: str = Field(
        description="small_cnn | resnet18_cifar | gpt | torchvision:NAME | timm:NAME | hf_causal_lm "
        "| hf_sequence_classifier | package.module:callable"
    )
    num_classes: int | None = Field(
        None, ge=1, description="output classes (vocabulary size for a language model); default: the dataset's"
    )
    args: dict[str, Any] = Field(default_factory=dict, description="extra keyword arguments for the builder")
    weights: WeightsConfig | None = Field(
        None,
        description="pretrained weights from a local state dict file, "
        "loaded before the model moves to the device: a path, or {path, strict}",
    )

    @field_validator("weights", mode="before")
    @classmethod
    def _path_alone(cls, value: Any) -> Any:  # shorthand: `weights: resnet18.pth`
        return {"path": value} if isinstance(value, (str, Path)) else value

    def without_weights(self) -> ModelConfig:
        """This model for loading a checkpoint into (resume, export): the checkpoint holds the trained weights, so
        the pretrained file is not read, and may be gone by then."""
        return self.model_copy(update={"weights": None})


def build_model(cfg: ModelConfig, **data_args: Any) -> nn.Module:
    """Build the model a recipe names. `data_args` (num_classes, in_channels, vocab_size, context) reach the
    builders that name them. Unknown names list what exists."""
    if cfg.num_classes is not None:
        _check_outputs(cfg.num_classes, data_args)
        data_args["num_classes"] = cfg.num_classes
        if "vocab_size" in data_args:
            data_args["vocab_size"] = cfg.num_classes
    if is_library_model(cfg.name):
        model = library_model(cfg.name, data_args, cfg.args)
    else:
        builder = import_attribute(cfg.name) if ":" in cfg.name else MODELS.get(cfg.name)
        _check_args(builder, cfg)
        model = builder(**{**_accepted(builder, data_args), **cfg.args})
    if cfg.weights is not None:
        load_weights(model, cfg.weights)
    return model


def _check_outputs(num_classes: int, data_args: dict[str, Any]) -> None:
    """A head smaller than the data's labels fails mid-run on the first label it cannot score: say so now."""
    vocab, classes = data_args.get("vocab_size"), data_args.get("num_classes")
    needed = vocab if vocab is not None else classes
    if needed is None or num_classes >= needed:
        return
    what = (
        f"a vocabulary of {needed} tokens (ids 0 to {needed - 1})"
        if vocab is not None
        else f"{needed} classes (labels 0 to {needed - 1})"
    )
    raise AccelError(
        f"model.num_classes is {num_classes}, but the data has {what}: set model.num_classes to at "
        f"least {needed}, or leave it out to take the data's."
    )


def _check_args(builder: Any, cfg: ModelConfig) -> None:
    """Every model.args key must be a keyword the builder takes (unless it takes **kwargs)."""
    try:
        parameters = inspect.signature(builder).parameters
    except (TypeError, ValueError):  # no signature to check against: the builder's own error stands
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    accepted = [
        name
        for name, p in parameters.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    unknown = [key for key in cfg.args if key not in accepted]
    if unknown:
        raise AccelError(
            f"model.args.{unknown[0]}: model `{cfg.name}` takes no argument `{unknown[0]}`"
            f"{did_you_mean(unknown[0], accepted)}. Its arguments: {', '.join(accepted)}."
        )


def _accepted(builder: Any, data_args: dict[str, Any]) -> dict[str, Any]:
    """The data arguments the builder's signature names."""
    try:
        names = inspect.signature(builder).parameters
    except (TypeError, ValueError):  # some builtins and C callables have no signature
        return {"num_classes": data_args["num_classes"]}
    return {name: value for name, value in data_args.items() if name in names and value is not None}
