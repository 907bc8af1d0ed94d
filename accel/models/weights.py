"""Pretrained weights from a local file (`model.weights`), loaded into the freshly built model before it moves to
the device and before any speed-up wraps it. Read safely: `.safetensors` through safetensors, anything else with
`torch.load(weights_only=True)`, which never runs code from the file."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from pydantic import Field
from torch import nn

from ..errors import AccelError
from ..extras import import_or_explain
from ..schema import StrictModel

log = logging.getLogger("accel")
SHOWN = 10  # keys listed per kind of mismatch
WRAPPERS = ("state_dict", "model", "model_state_dict")  # where training scripts commonly keep the weights
PREFIXES = ("module.", "_orig_mod.")  # what DDP and torch.compile add to every key of a wrapped model


class WeightsConfig(StrictModel):
    path: Path = Field(
        description="a state dict file: `.safetensors`, or `.pt`/`.pth` read with weights_only=True "
        "(a bare state dict, one under a `state_dict`, `model` or `model_state_dict` key, or accel's "
        "own RUN_DIR/checkpoints/last.pt)"
    )
    strict: bool = Field(
        True,
        description="every key of the model and the file must match, in name and shape; "
        "false loads the keys that match and logs the rest. A classifier head whose class count "
        "differs (or that the file lacks) is re-initialised either way",
    )


def load_weights(model: nn.Module, cfg: WeightsConfig) -> None:
    """Load `cfg.path` into `model`, re-initialising (keeping as built) a classifier head whose size differs."""
    state = _strip_prefixes(read_state_dict(cfg.path), model)
    own = model.state_dict()
    head = _head_keys(model, own, state)
    mismatched = [k for k in state if k in own and _shape(state[k]) != _shape(own[k]) and k not in head]
    missing = [k for k in own if k not in state and k not in head]
    unexpected = [k for k in state if k not in own]
    problems = _problems(missing, unexpected, [f"{k} {_shape(state[k])} vs {_shape(own[k])}" for k in mismatched])
    if problems and cfg.strict:
        raise AccelError(
            f"model.weights {cfg.path} does not fit the model ({type(model).__name__}): "
            f"{'; '.join(problems)}. Check that `model.name` and `model.args` build the model the file "
            "was saved from, or set `model.weights.strict: false` to load the keys that match."
        )
    if problems:
        log.warning("model.weights %s: not loaded (strict: false): %s", cfg.path, "; ".join(problems))
    if head:
        log.info("%s", _head_note(head, own, state))
    loaded = {k: v for k, v in state.items() if k in own and k not in head and k not in mismatched}
    model.load_state_dict(loaded, strict=False)
    log.info("model.weights: loaded %d of the model's %d tensors from %s", len(loaded), len(own), cfg.path)


def read_state_dict(path: Path) -> dict[str, Any]:
    """The state dict in a file, unwrapped from the containers training scripts save it in."""
    if not path.is_file():
        raise AccelError(
            f"model.weights: no file at {path}"
            + (" (it is a directory)" if path.is_dir() else "")
            + ". Name a state dict saved with torch.save or safetensors."
        )
    if path.suffix == ".safetensors":
        return _read_safetensors(path)
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickled objects weights_only refuses, or not a torch file at all
        if "Unsupported global" in str(err):
            raise AccelError(
                f"Refused to load model.weights {path}: it holds Python objects other than tensors "
                "(a whole pickled model?), and accel loads weights with weights_only=True, so it never "
                "runs code from a file. Save `model.state_dict()` instead."
            ) from None
        raise AccelError(f"model.weights {path} is damaged or not a torch file ({type(err).__name__}).") from None
    state = _unwrap(saved)
    if not isinstance(state, dict) or not any(isinstance(v, torch.Tensor) for v in state.values()):
        what = (
            f"a dict with keys {', '.join(map(str, list(saved)[:SHOWN]))}"
            if isinstance(saved, dict)
            else type(saved).__name__
        )
        raise AccelError(
            f"model.weights {path} holds no state dict of tensors ({what}). Save "
            "`model.state_dict()`, or a dict holding it under `state_dict` or `model`."
        )
    return state


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    load_file = import_or_explain("safetensors.torch", f"model.weights {path}").load_file
    try:
        return load_file(path, device="cpu")
    except Exception as err:  # safetensors raises its own error types for a bad header or a cut-off file
        raise AccelError(f"model.weights {path} is damaged or not a safetensors file ({err}).") from None


def _unwrap(saved: Any) -> Any:
    if isinstance(saved, dict) and "model_signature" in saved:  # accel's own checkpoint: the trained weights
        return saved.get("model")
    for key in WRAPPERS:
        if isinstance(saved, dict) and isinstance(saved.get(key), dict):
            return saved[key]
    return saved


def _strip_prefixes(state: dict[str, Any], model: nn.Module) -> dict[str, Any]:
    """Keys saved from a DDP- or compile-wrapped model, unwrapped, where the model's own keys lack the prefix."""
    own = model.state_dict()
    for prefix in PREFIXES:
        if state and all(k.startswith(prefix) for k in state) and not any(k.startswith(prefix) for k in own):
            state = {k[len(prefix) :]: v for k, v in state.items()}
    return state


def _shape(value: Any) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def classifier_name(model: nn.Module) -> str | None:
    """The final classifier's module name: timm's `get_classifier()`, torchvision's `fc`/`classifier`/`heads`/`head`,
    else the last `nn.Linear`."""
    names = {id(module): name for name, module in model.named_modules()}
    if callable(getattr(model, "get_classifier", None)):
        found = names.get(id(model.get_classifier()))
        if found:
            return found
    for attribute in ("fc", "classifier", "heads", "head"):
        if isinstance(getattr(model, attribute, None), nn.Module):
            return attribute
    linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    return linears[-1] if linears else None


def _head_keys(model: nn.Module, own: dict[str, Any], state: dict[str, Any]) -> list[str]:
    """The classifier's keys that the file lacks or holds at another size: left as built, not loaded."""
    name = classifier_name(model)
    if name is None:
        return []
    keys = [k for k in own if k.startswith(name + ".")]
    return [k for k in keys if k not in state or _shape(state[k]) != _shape(own[k])]


def _head_note(head: list[str], own: dict[str, Any], state: dict[str, Any]) -> str:
    resized = [k for k in head if k in state and _shape(own[k])]
    if not resized:
        return f"head initialised: the file has no {', '.join(head)}"
    key = resized[0]
    return (
        f"head re-initialised: {_shape(state[key])[0]} -> {_shape(own[key])[0]} classes ({', '.join(head)} not loaded)"
    )


def _problems(missing: list[str], unexpected: list[str], mismatched: list[str]) -> list[str]:
    def listed(what: str, keys: list[str]) -> str:
        more = f", ... ({len(keys) - SHOWN} more)" if len(keys) > SHOWN else ""
        return f"{len(keys)} {what}: {', '.join(keys[:SHOWN])}{more}"

    return [
        listed(what, keys)
        for what, keys in [
            ("missing from the file", missing),
            ("in the file but not in the model", unexpected),
            ("of another shape", mismatched),
        ]
        if keys
    ]
