"""Which agent a script's engines join in a trial's process: the profile `accel profile` asked for, the bench's
probe or its trial (accel/trial/requested.py), one per process whatever its number of engines. Registered among
the engine's process observers (accel.engine.process_observers) by the trial's sitecustomize, before the script's
first line; torch-free until an engine is made."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..engine import process_observers
from ..engine.trial_variables import PATH, PROFILE
from .instrument import guard  # torch-free

if TYPE_CHECKING:
    from ..engine.loop_records import LoopRecords
    from ..engine.settings import Settings
    from .engine_agent import Agent, Joined

_SHARED: dict[str, Any] = {}  # the process's trial or profile, by the variables that asked for it: engines join it


def register() -> None:
    """Every engine this process makes joins the agent the bench or the profile asked for."""
    process_observers.register(attach)


def attach(engine: LoopRecords, settings: Settings) -> Joined | None:
    """The observer of an engine (its records) for the trial the bench asked for, or for the window `accel
    profile` asked for, joined by every later engine of the process; None without either."""
    key = os.environ.get(PROFILE) or os.environ.get(PATH)
    if not key:
        return None
    from .engine_agent import Joined

    guard.stand_down_recorder()  # the engine measures its own steps, not the instrument
    shared = _SHARED.get(key)
    if shared is not None and not shared.done:
        shared.join(engine)
        return Joined(shared, engine)
    agent = _new(engine, settings)
    _SHARED.clear()
    if agent is None:
        return None
    _SHARED[key] = agent
    return Joined(agent, engine)


def _new(engine: LoopRecords, settings: Settings) -> Agent | None:
    if os.environ.get(PROFILE):  # imported only here: the report's plots need matplotlib
        from .engine_profile import attach as profile

        return profile(engine)
    from ..bench.pruner import Deadline
    from .engine_agent import Probe, ScriptTrial
    from .requested import requested

    asked = requested()
    if asked is None:
        return None
    if asked.probe:
        return Probe(engine, settings, asked.path)
    trial = ScriptTrial(engine, asked.path, asked.warmup, asked.steps, asked.window)
    trial.target, trial.metric, trial.stop, trial.every_step = asked.target, asked.metric, asked.stop, asked.every_step
    trial.deadline = Deadline(asked.deadline, asked.warmup) if asked.deadline is not None else None
    return trial
