"""Models by library name, `torchvision:NAME` and `timm:NAME`, built without pretrained weights: nothing downloads
at run time (`model.weights` loads a local file instead). One rule for every library: an unknown name is an error
that lists the close ones, a library that is not installed is an error that says how to install it."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..errors import AccelError
from ..extras import import_or_explain


@dataclass(frozen=True)
class Library:
    package: str
    names: Callable[[Any], list[str]]  # the library module -> the model names it builds
    list_all: str  # a command that prints them all
    create: Callable[[Any, str, dict[str, Any], dict[str, Any]], nn.Module]  # (module, name, data_args, args)


def _torchvision_names(torchvision: Any) -> list[str]:
    return torchvision.models.list_models(module=torchvision.models)


def _torchvision_create(torchvision: Any, name: str, data_args: dict[str, Any], args: dict[str, Any]) -> nn.Module:
    # weights=None: nothing is downloaded at run time; pass `args: {weights: ...}` when the files are cached.
    return torchvision.models.get_model(name, **{"num_classes": data_args["num_classes"], "weights": None, **args})


def _timm_create(timm: Any, name: str, data_args: dict[str, Any], args: dict[str, Any]) -> nn.Module:
    if args.get("pretrained"):
        raise AccelError(
            f"model `timm:{name}`: `model.args.pretrained` would download weights at run time; "
            "accel builds timm models without them. Save the weights to a file and name it in "
            "`model.weights` (a .safetensors or .pt state dict)."
        )
    data = {"num_classes": data_args["num_classes"]}
    if data_args.get("in_channels"):
        data["in_chans"] = data_args["in_channels"]
    return timm.create_model(name, **{**data, **args, "pretrained": False})  # args: num_classes 0 = features only


LIBRARIES: dict[str, Library] = {
    "torchvision": Library(
        "torchvision",
        _torchvision_names,
        "python -c 'import torchvision; print(torchvision.models.list_models())'",
        _torchvision_create,
    ),
    "timm": Library(
        "timm",
        lambda timm: timm.list_models(),
        "python -c 'import timm; print(timm.list_models())'",
        _timm_create,
    ),
}


def is_library_model(name: str) -> bool:
    return name.partition(":")[0] in LIBRARIES


def library_model(full_name: str, data_args: dict[str, Any], args: dict[str, Any]) -> nn.Module:
    """Build `LIBRARY:NAME` with the data's `num_classes` (and image channels where the library takes them)."""
    prefix, _, name = full_name.partition(":")
    library = LIBRARIES[prefix]
    module = import_or_explain(library.package, f"model `{full_name}`")
    available = library.names(module)
    if name.split(".")[0] not in available:  # timm also takes NAME.TAG (a pretrained tag, ignored without weights)
        raise AccelError(unknown_model_message(prefix, name, available, library.list_all))
    try:
        return library.create(module, name, data_args, args)
    except TypeError as err:  # the model class's own signature hides behind the library's **kwargs
        if "unexpected keyword argument" not in str(err):
            raise
        key = str(err).rsplit("argument", 1)[-1].strip(" '\"")
        raise AccelError(f"model.args.{key}: {prefix} model `{name}` takes no argument `{key}` ({err}).") from None


def unknown_model_message(library: str, name: str, available: list[str], list_all: str) -> str:
    close = difflib.get_close_matches(name, available, n=8, cutoff=0.6)
    nearest = f"Close names: {', '.join(close)}." if close else "No name is close."
    return f"Unknown {library} model `{name}`. {nearest} {len(available)} models in all; `{list_all}` lists them."
