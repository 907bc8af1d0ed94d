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

from . import devices
from .checkpoint import save_checkpoint, unreadable_message
from .engine_wrappers import unwrap
from .errors import CheckpointError
from .rng import rng_state, set_rng_state

if TYPE_CHECKING:
    from .engine import Engine

FORMAT = "accel-engine/1"


def _has_state(value: Any) -> bool:
    return callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None))


def save(engine: Engine, path: str | Path, state: dict[str, Any]) -> None:
    """Rank 0 writes; every rank waits for it, so none reads a half-written file after."""
    payload = {
        "format": FORMAT,
        "state": {key: devices.to_cpu(unwrap(v).state_dict()) if _has_state(v) else v for key, v in state.items()},
        "engine": {
            "speedups": {s.name: s.state_dict() for s in engine.speedups},
            "rng": rng_state(),
            "steps": engine.steps,
        },
    }
    if engine.world.is_main:
        save_checkpoint(payload, Path(path))
    engine.world.barrier()


def load(engine: Engine, path: str | Path, state: dict[str, Any]) -> dict[str, Any]:
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
    for key, value in state.items():
        if _has_state(value):
            unwrap(value).load_state_dict(saved[key])
        else:
            state[key] = saved[key]
    engine.setup_speedups()  # a speed-up's saved state goes into the objects that will use it
    for speedup in engine.speedups:
        speedup.load_state_dict(payload["engine"]["speedups"].get(speedup.name, {}))
    set_rng_state(payload["engine"]["rng"])
    engine.steps = payload["engine"]["steps"]
    return state
