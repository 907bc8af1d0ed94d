"""A plain script's own options, as its argparse parsers declare them (recorded in the probe by
accel/bench/instrument/parsers.py): how a variant's `arg:--OPTION` value goes on its command line, and whether the
script's parser takes it, asked of a parser rebuilt from the recorded options, before any trial runs.

`present` and `absent` switch an option by its presence (a `store_true` flag, `--no-x` of a BooleanOptionalAction,
an optional value's const); a value with spaces is several values where the option takes several (`nargs`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

PRESENT, ABSENT = "present", "absent"
TYPES = {None: None, "str": str, "int": int, "float": float}  # what a parser's own check can be rebuilt with


@dataclass(frozen=True)
class Option:
    """One option of the script's parser, as recorded: its spellings, kind (store_true, store_false,
    boolean_optional, flag, store), values, help, and the value the script got (`value`)."""

    options: tuple[str, ...]
    dest: str
    kind: str
    nargs: Any = None
    const: Any = None
    choices: tuple[Any, ...] | None = None
    type: str | None = None
    default: Any = None
    value: Any = None
    help: str | None = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> Option:
        choices = data.get("choices")
        return cls(**(data | {"options": tuple(data["options"]), "choices": tuple(choices) if choices else None}))

    @property
    def name(self) -> str:
        """Its long spelling (`--channels-last`), else its first."""
        return next((o for o in self.options if o.startswith("--")), self.options[0])

    @property
    def takes_values(self) -> bool:
        return self.nargs != 0

    @property
    def many(self) -> bool:
        return self.nargs in ("+", "*", argparse.REMAINDER) or (isinstance(self.nargs, int) and self.nargs > 1)


class ScriptOptions:
    """The options of every parser the script parsed its command line with (timm parses twice: a config parser's
    known options, then its own)."""

    def __init__(self, parsers: list[dict[str, Any]]):
        self.parsers = parsers
        self.options = [Option.of(action) for parser in parsers for action in parser["actions"]]

    @classmethod
    def of(cls, given: dict[str, Any]) -> ScriptOptions | None:
        """From the probe's answer; None where the script parsed no command line with argparse."""
        parsers = given.get("parsers") or []
        return cls(parsers) if parsers else None

    def find(self, spelling: str) -> Option | None:
        return next((o for o in reversed(self.options) if spelling in o.options), None)

    def refusal(self, settings: dict[str, str | None]) -> str | None:
        """What the script's parser says of these `{--OPTION: value}` settings (its own words, `train.py: error:
        argument --channels-last: ignored explicit argument 'True'`), or None where it takes them."""
        words = [word for spelling, value in settings.items() for word in tokens(spelling, value, self.find(spelling))]
        parser = self._rebuilt()
        try:
            if any(p["strict"] for p in self.parsers):
                parser.parse_args(words)
            else:
                parser.parse_known_args(words)
        except _Refused as refused:
            return str(refused)
        return None

    def _rebuilt(self) -> argparse.ArgumentParser:
        """The script's options in one parser, nothing required: only the variant's own settings are asked of it
        (the rest of the command is the script as given, which the probe ran). A value's type or choices are checked
        where the script's check can be rebuilt (int, float, str)."""
        last = self.parsers[-1]
        parser = _Parser(
            prog=last["prog"], add_help=False, conflict_handler="resolve", prefix_chars=last["prefix_chars"]
        )
        for option in self.options:
            if not option.takes_values:
                parser.add_argument(*option.options, dest=option.dest, action="store_true")
                continue
            known = option.type in TYPES
            try:
                parser.add_argument(
                    *option.options,
                    dest=option.dest,
                    nargs=option.nargs,
                    const=option.const if option.nargs == "?" else None,
                    type=TYPES.get(option.type),
                    choices=option.choices if known else None,
                )
            except ValueError:  # a custom action's nargs that argparse's own store refuses: any values
                parser.add_argument(*option.options, dest=option.dest, nargs="*")
        return parser


def tokens(spelling: str, value: str | None, option: Option | None) -> list[str]:
    """What a variant adds to the command line for `spelling` set to `value` (None, absent: nothing): the form
    every parser reads, `--batch=8` (nanoGPT's configurator takes nothing else); several values as words."""
    if value is None or value == ABSENT:
        return []
    if value == PRESENT:
        return [spelling]
    if option is not None and option.many:
        return [spelling, *value.split()]
    return [f"{spelling}={value}"] if spelling.startswith("--") else [spelling, value]


def is_option(token: str) -> bool:
    """Whether a command-line token is an option rather than a value (-1 and -1e-3 are values)."""
    try:
        float(token)
        return False
    except ValueError:
        return token.startswith("-")


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise _Refused(f"{self.prog}: error: {message}")
