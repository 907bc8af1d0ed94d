"""Models by name: accel's own small ones, `torchvision:NAME`, or any `package.module:callable`."""
from __future__ import annotations

import importlib
from typing import Any

import torch
from pydantic import Field
from torch import nn

from .errors import AccelError
from .registry import MODELS
from .schema import StrictModel


class ModelConfig(StrictModel):
    name: str = Field(description="small_cnn | resnet18_cifar | torchvision:NAME | package.module:callable")
    num_classes: int | None = Field(None, ge=1, description="output classes; default: the dataset's")
    args: dict[str, Any] = Field(default_factory=dict, description="extra keyword arguments for the builder")


def _conv_bn(cin: int, cout: int, stride: int = 1, batch_norm: bool = True) -> nn.Sequential:
    norm = nn.BatchNorm2d(cout) if batch_norm else nn.Identity()
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=not batch_norm), norm, nn.ReLU(inplace=True))


@MODELS.register("small_cnn")
def small_cnn(num_classes: int, in_channels: int = 1, width: int = 32, batch_norm: bool = True) -> nn.Module:
    """Three conv-BN-ReLU stages and a linear head: fast on a CPU, ~98% on MNIST-5k.

    `batch_norm: false` makes each sample's gradient independent of the rest of its batch, so results do
    not depend on how a batch is split (across processes or micro-batches).
    """
    return nn.Sequential(
        _conv_bn(in_channels, width, batch_norm=batch_norm), nn.MaxPool2d(2),
        _conv_bn(width, 2 * width, batch_norm=batch_norm), nn.MaxPool2d(2),
        _conv_bn(2 * width, 4 * width, batch_norm=batch_norm), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(4 * width, num_classes),
    )


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(_conv_bn(cin, cout, stride), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(cout))
        self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


@MODELS.register("resnet18_cifar")
def resnet18_cifar(num_classes: int, in_channels: int = 3) -> nn.Module:
    """ResNet-18 for 32x32 inputs: a 3x3 stem and no max-pool, as in the CIFAR literature."""
    layers: list[nn.Module] = [_conv_bn(in_channels, 64)]
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


def build_model(cfg: ModelConfig, *, num_classes: int, in_channels: int) -> nn.Module:
    """Build the model a recipe names. Unknown names list what exists."""
    classes = cfg.num_classes or num_classes
    if cfg.name.startswith("torchvision:"):
        return _torchvision_model(cfg.name.split(":", 1)[1], classes, cfg.args)
    if ":" in cfg.name:
        return _imported_model(cfg.name, classes, cfg.args)
    builder = MODELS.get(cfg.name)
    args = dict(cfg.args)
    if "in_channels" in builder.__code__.co_varnames:
        args.setdefault("in_channels", in_channels)
    return builder(num_classes=classes, **args)


def _torchvision_model(name: str, num_classes: int, args: dict) -> nn.Module:
    import torchvision

    available = torchvision.models.list_models(module=torchvision.models)
    if name not in available:
        from .errors import did_you_mean

        raise AccelError(f"Unknown torchvision model `{name}`{did_you_mean(name, available)}. "
                         f"Classification models: {', '.join(available)}.")
    # weights=None: nothing is downloaded at run time; pass `args: {weights: ...}` when the files are cached.
    return torchvision.models.get_model(name, num_classes=num_classes, **{"weights": None, **args})


def _imported_model(target: str, num_classes: int, args: dict) -> nn.Module:
    module_name, _, attr = target.partition(":")
    try:
        builder = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise AccelError(f"Cannot import model builder `{target}`: {err}. "
                         "Use `package.module:callable`, with the package importable.") from None
    return builder(num_classes=num_classes, **args)
