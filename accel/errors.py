"""Errors meant for people. The CLI prints them as one paragraph and exits with code 2."""

from __future__ import annotations

import difflib
import errno
import os
import sys
from collections.abc import Iterable
from pathlib import Path

# set by accel's torchrun (accel/launch/torchrun.py) for its ranks: a folder where each leaves its error, said
# once there
RANK_ERRORS = "ACCEL_RANK_ERRORS"


class AccelError(Exception):
    """A problem with the user's input or environment, not a bug in accel."""


class RecipeError(AccelError):
    """A recipe that cannot be read or does not validate."""


class DataError(AccelError):
    """A dataset that is missing, malformed or unreadable."""


class CheckpointError(AccelError):
    """A checkpoint that is missing or does not fit the run."""


class SpeedupUnavailable(AccelError):
    """A speed-up that cannot run on this hardware, raised only in strict mode."""


def say_uncaught_plainly() -> None:
    """From now on an accel error nothing caught ends the script with its message alone, as the CLI prints it: a
    user's `python train.py` that accel refuses (a misspelt ACCEL_SET key) gets the sentence, not a traceback
    around it. One rank of several stopped by Ctrl-C, or by another rank ending in the middle of a collective (gloo's
    "Connection closed by peer"), says so in one line rather than a traceback per rank. ACCEL_TRACEBACK=1 keeps the
    tracebacks; other exceptions are Python's as ever."""
    previous = sys.excepthook
    if getattr(previous, "accel_plain", False) or os.environ.get("ACCEL_TRACEBACK") == "1":
        return

    def hook(kind, value, tb):
        said = plain_message(value)
        if said is None:
            previous(kind, value, tb)
        else:
            print(f"accel: {said}", file=sys.stderr)

    hook.accel_plain = True
    sys.excepthook = hook


# gloo's and the TCP store's words for a rank that has ended ("Connection was likely closed. Did the remote worker
# crash or exit?")
PEER_GONE = ("closed by peer", "reset by peer", "Broken pipe", "likely closed", "remote worker crash")


def plain_message(error: BaseException) -> str | None:
    """The one line an uncaught `error` ends the process with, or None for Python's own traceback."""
    if isinstance(error, AccelError):
        return str(error)
    rank = os.environ.get("RANK") if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None
    if rank is None:
        return None
    if isinstance(error, KeyboardInterrupt):
        return f"rank {rank} interrupted"
    if any(words in str(error) for words in PEER_GONE):
        return (
            f"rank {rank} stopped: another rank ended in the middle of a collective ({str(error).splitlines()[0]}); "
            "that rank's own line says why"
        )
    return None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean `x`?)' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def user_message(err: BaseException) -> str:
    """The error's own words. An error re-raised from a DataLoader worker carries the worker's whole traceback
    ("Caught DataError in DataLoader worker process 0. Original Traceback ..."): keep only its last message."""
    text = str(err)
    if "Original Traceback" not in text:
        return text
    marker = f"{type(err).__module__}.{type(err).__qualname__}: "
    where = text.rfind(marker)
    return text[where + len(marker) :].strip() if where >= 0 else text.strip().splitlines()[-1]


def say_error(message: str) -> None:
    """'error: MESSAGE' on stderr; a rank under accel's torchrun leaves it in RANK_ERRORS instead, where torchrun
    says each distinct message once (every rank refusing the same resume printed it once each)."""
    folder, rank = os.environ.get(RANK_ERRORS), os.environ.get("RANK")
    if folder and rank is not None:
        try:
            (Path(folder) / f"rank-{rank}.txt").write_text(message)
            return
        except OSError:  # its folder is gone: say it here
            pass
    print(f"error: {message}", file=sys.stderr)


def disk_full(err: BaseException | None) -> bool:
    """ENOSPC or EDQUOT anywhere in the chain: torch's zip writer reports a failed write as a RuntimeError
    ("unexpected pos ...") raised while handling the OSError that says why."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(err):  # torch's own writer, given a path, words it so
            return True
        err = err.__cause__ or err.__context__
    return False
