"""Options several commands share."""

from __future__ import annotations

import argparse
import math
import re

from ..errors import AccelError

# The timed window a trial takes at least when --steps is left out: a 5 ms step gets ~200 timed steps, a 2 s step
# keeps the default count. Given --steps alone, a trial times that count alone (as scripts, CI and tests ask for).
DEFAULT_WINDOW = "1s"


def add_sets(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe key before anything else, e.g. --set data.batch_size=64 (repeatable)",
    )


def add_trial_options(parser: argparse.ArgumentParser, steps: int | str, warmup: int | str, trials: int | str) -> None:
    """The options every trial takes; `steps`, `warmup` and `trials` given as text are the help's account of
    defaults the command resolves itself (None until then)."""
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help=f"timed optimizer steps per trial, at least (default {steps})",
    )
    parser.add_argument(
        "--window",
        type=window_duration,
        default=None,
        metavar="SECONDS",
        help="and time steps until they hold this long (s, m: 2s, 0.5m; 0: the steps alone; default "
        f"{DEFAULT_WINDOW} without --steps, else 0); leading one-off steps count as warm-up, not in it",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=warmup if isinstance(warmup, int) else None,
        help=f"untimed steps before them; compile happens here (default {warmup})",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=trials if isinstance(trials, int) else None,
        help=f"fresh processes per variant (default {trials})"
        if isinstance(trials, int)
        else f"fresh processes per variant: {trials}",
    )
    parser.add_argument("--timeout", type=float, help="seconds before a trial is killed and recorded as failed")
    parser.add_argument(
        "--warm-cache",
        action="store_true",
        help="share one TORCHINDUCTOR_CACHE_DIR under the output folder (default: cold per trial)",
    )


def trial_steps(args: argparse.Namespace, steps: int) -> None:
    """--steps and --window as a trial takes them: left out, `steps` and (unless --window was given) the default
    window; --steps alone, its count alone."""
    if args.window is None:
        args.window = parse_duration(DEFAULT_WINDOW) if args.steps is None else 0.0
    if args.steps is None:
        args.steps = steps


def check_trial_options(args: argparse.Namespace) -> None:
    if args.steps < 1 or args.warmup < 0 or args.trials < 1:
        raise AccelError(
            f"need --steps >= 1, --warmup >= 0 and --trials >= 1; got {args.steps}, {args.warmup}, {args.trials}."
        )
    # `not > 0`, not `<= 0`: NaN compares false both ways, and was taken as no limit at all
    if args.timeout is not None and not (0 < args.timeout < math.inf):
        raise AccelError(
            f"--timeout must be a positive, finite number of seconds, got {args.timeout}; leave it out for no limit."
        )


def add_metric_pattern(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metric-pattern",
        action="append",
        default=[],
        type=metric_pattern,
        metavar="REGEX",
        help="for a script that prints its metrics: a regular expression whose named groups are metrics, matched "
        "against each line it prints, e.g. 'val loss (?P<val_loss>[0-9.]+)' (repeatable); --target and the "
        "results check read them",
    )


def parse_duration(text: str) -> float:
    """Seconds in `90`, `90s`, `15m` or `1.5h`."""
    seconds = _seconds(text)
    if not 0 < seconds < math.inf:  # NaN fails every comparison: `seconds <= 0` let it through
        raise argparse.ArgumentTypeError(f"the budget must be a positive, finite duration, got `{text}`")
    return seconds


def window_duration(text: str) -> float:
    """--window: seconds as parse_duration reads them, 0 included (the steps alone)."""
    seconds = _seconds(text)
    if not 0 <= seconds < math.inf:
        raise argparse.ArgumentTypeError(f"the window must be a finite duration of 0 or more, got `{text}`")
    return seconds


def _seconds(text: str) -> float:
    scale = {"s": 1, "m": 60, "h": 3600}.get(text.strip()[-1:].lower())
    try:
        return float(text.strip()[:-1] if scale else text) * (scale or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"`{text}` is not a duration: use e.g. 900, 90s, 15m or 1.5h") from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of optimizer steps, at least 1")
    return value


def metric_pattern(text: str) -> str:
    """A --metric-pattern: a regular expression with at least one named group (the metric's name)."""
    try:
        groups = re.compile(text).groupindex
    except re.error as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {err}") from None
    if not groups:
        raise argparse.ArgumentTypeError(
            f"{text!r} names no metric: put the value in a named group, e.g. 'val loss (?P<val_loss>[0-9.]+)'"
        )
    return text
