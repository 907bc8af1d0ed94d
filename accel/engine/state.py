"""`eng.save(path, state)` and `eng.load(path, state)`: a hand-written loop's checkpoint, written atomically and
read with `weights_only`, with what the engine itself keeps (the speed-ups' state, such as the GradScaler's scale
and the EMA weights; the random state; the optimizer steps taken).

`state` is the loop's own dict: modules, optimizers, schedulers and loaders (anything with `state_dict`) are saved
through it and loaded back in place; plain values (an iteration count, a best loss) are saved as they are and put
back into the dict on load.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .. import devices
from ..errors import CheckpointError
from ..runs.checkpoint import save_checkpoint, unreadable_message
from .wrappers import unwrap

if TYPE_CHECKING:
    from .core import Core

FORMAT = "accel-engine/1"


def _has_state(value: Any) -> bool:
    return callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None))


def _whole(engine: Core) -> dict[str, Any]:
    """The engine's model and optimizer as whole tensors (gathered from every rank under fsdp: collective)."""
    model, optimizer = engine.strategy.full_state_dicts(engine.module, engine.optimizer)
    return {"model": model, "optimizer": optimizer}


def _role(engine: Core, value: Any) -> str | None:
    """ "model" or "optimizer" for the engine's own (as the loop holds them), else None."""
    if engine.module is not None and getattr(value, "__dict__", None) is engine.module.__dict__:
        return "model"  # the module, or the model eng.setup returned (which shares its attributes)
    return "optimizer" if engine.optimizer is not None and unwrap(value) is engine.optimizer else None


def _state_of(value: Any, whole: dict[str, Any], role: str | None) -> Any:
    if role is not None:
        return whole[role]
    return devices.to_cpu(unwrap(value).state_dict()) if _has_state(value) else value


def save(engine: Core, path: str | Path, state: dict[str, Any]) -> None:
    """Rank 0 writes; every rank waits for it, so none reads a half-written file after."""
    roles = {key: _role(engine, value) for key, value in state.items()}
    whole = _whole(engine) if any(roles.values()) else {}
    payload = {
        "format": FORMAT,
        "state": {key: _state_of(value, whole, roles[key]) for key, value in state.items()},
        "engine": engine.own_state(),
    }
    if engine.world.is_main:
        save_checkpoint(payload, Path(path))
    engine.world.barrier()


def load(engine: Core, path: str | Path, state: dict[str, Any]) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"No checkpoint at {path}: `eng.load` reads a file `eng.save` wrote.")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated or foreign files, or objects weights_only refuses
        raise CheckpointError(unreadable_message(path, err)) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} was not written by `eng.save` (accel's engine): it cannot be loaded with eng.load"
        )
    saved = payload["state"]
    missing = sorted(set(state) - set(saved))
    if missing:
        raise CheckpointError(
            f"{path} holds no {', '.join(missing)} (it holds {', '.join(sorted(saved)) or 'nothing'}): "
            "load with the keys it was saved with"
        )
    roles = {key: _role(engine, value) for key, value in state.items()}
    if engine.strategy.name == "fsdp" and any(roles.values()):  # collective: each rank keeps its slice
        by_role = {role: saved[key] for key, role in roles.items() if role}
        if len(by_role) < 2:
            raise CheckpointError("under strategy fsdp, eng.load loads the model and the optimizer together")
        engine.strategy.load_full_state_dicts(engine.module, engine.optimizer, by_role["model"], by_role["optimizer"])
    for key, value in state.items():
        if roles[key] and engine.strategy.name == "fsdp":
            continue
        if _has_state(value):
            unwrap(value).load_state_dict(saved[key])
        else:
            state[key] = saved[key]
    engine.load_own_state(payload["engine"])
    return state
