"""The observers every `accel.Engine` of this process gets, made by factories registered here: how a bench trial or
a profile joins a script's engines (accel/trial registers its dispatch before the script's first line, in a trial's
process only) without the engine importing it. Torch-free, since it is registered that early."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import Observer
    from .loop_records import LoopRecords
    from .settings import Settings

Factory = Callable[["LoopRecords", "Settings"], "Observer | None"]
FACTORIES: list[Factory] = []


def register(factory: Factory) -> None:
    """Call `factory` with each new engine's records and settings; the observer it makes (None: none) joins it."""
    FACTORIES.append(factory)


def made_for(records: LoopRecords, settings: Settings) -> list[Observer]:
    """The observers of a new engine."""
    return [observer for factory in FACTORIES if (observer := factory(records, settings)) is not None]
