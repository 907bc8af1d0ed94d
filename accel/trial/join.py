"""A process joins its trial: the one sequence, whether Python ran it from the trial's sitecustomize before the
script's first line or the trial's zygote runs it in a process forked for the trial (accel/trial/zygote.py).
Torch-free: what the script imports is watched from here on (or joined at once where it is already imported)."""

from __future__ import annotations

import os

from ..engine.trial_variables import PATH, PROFILE


def asked() -> bool:
    """Whether the bench or `accel profile` asked this process to be a trial, its probe or a profile."""
    return bool(os.environ.get(PATH) or os.environ.get(PROFILE))


def join() -> None:
    """Keep the user's files (`backups`, the room's fallback), start the instrument once torch is imported, record
    the script's argparse parsers as it parses, and have every accel.Engine it makes join the trial (`dispatch`)."""
    from . import backups, dispatch, preload
    from .instrument import import_watch, parsers

    preload.mark_start()  # the environment the script starts with, before it can change it
    backups.start()  # first: the script's every change to a file is seen (the room's fallback)
    import_watch.start()
    parsers.watch()
    dispatch.register()
