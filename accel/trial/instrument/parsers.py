"""The script's own `argparse` parsers, read as it parses its command line: each option's spellings, kind, values
and help, and the value the script got. The bench reads them from the probe's answer to switch a plain script's speed
flags (accel/bench/script_flags.py) and to refuse, before any trial, a variant its parser would refuse
(accel/bench/script_options.py). Torch-free and cheap: it records after the script's own call, and never changes
what the script gets, but for one thing: an option that names where the script writes (`--output`, `--output-dir`,
`--save-dir`, ...) points, in a probe or trial, into a folder of the process's own under the same name, as the HF
Trainer's `output_dir` does (accel/trial/instrument/hf_trainer.py): a bench's runs never write into the user's.
What the script made there is counted for the trial's record (`made`), so the report can say it."""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import re
import shutil
import sys
import tempfile
from typing import Any

# an option's destination that names a folder (or file) the script writes its run's outputs to
OUTPUTS = re.compile(
    r"(output|out|save|checkpoint|ckpt|log|logging|experiment|exp|run|work)_?(dir|path|folder|root)|output"
)
PARSERS: dict[int, dict[str, Any]] = {}  # by the parser's id: a parser parsed twice is recorded once, the last time
REDIRECTED: dict[str, tuple[str, str]] = {}  # by option: the path the script was given, and where it writes instead
_depth = 0  # parse_args calls parse_known_args, and a subcommand's parser is parsed inside its parent's


def watch() -> None:
    """From now on every parser the script parses its command line with is recorded (the outermost call only)."""
    for name in ("parse_args", "parse_known_args"):
        original = getattr(argparse.ArgumentParser, name)
        setattr(argparse.ArgumentParser, name, _recording(original, strict=name == "parse_args"))


def _recording(original, strict: bool):
    @functools.wraps(original)
    def parse(parser, *args, **kwargs):
        global _depth
        _depth += 1
        try:
            parsed = original(parser, *args, **kwargs)
        finally:
            _depth -= 1
        if _depth == 0:
            namespace = parsed[0] if isinstance(parsed, tuple) else parsed
            try:
                PARSERS[id(parser)] = described(parser, namespace, strict)
                redirect_outputs(parser, namespace)
            except Exception as err:  # noqa: BLE001 - the script goes on; the bench only misses its options
                print(f"accel: could not read the script's options: {err!r}", file=sys.stderr)
        return parsed

    return parse


def redirect_outputs(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> dict[str, tuple[str, str]]:
    """Point each output option the script was given (a path, not empty; a `pathlib.Path` stays one) into this
    process's own folder, under the same name; the folders it names are made by the script as it would its own. A
    file that is there already is one the script reads (`--checkpoint-path` to start from): left as given. What
    was redirected, by option: the path given and where it writes instead."""
    moved = {}
    for action in parser._actions:
        value = getattr(namespace, action.dest, None)
        if action.option_strings and OUTPUTS.fullmatch(action.dest) and _writes_to(value):
            name = os.path.basename(os.path.normpath(value)) or "output"
            path = os.path.join(_own_folder(), action.dest, name)
            setattr(namespace, action.dest, type(value)(path) if isinstance(value, os.PathLike) else path)
            moved[action.option_strings[-1]] = (os.fspath(value), path)
    if moved:
        said = ", ".join(f"{option} {given}" for option, (given, _) in moved.items())
        print(f"accel: this trial's outputs go to a folder of its own, not to {said}", file=sys.stderr)
    REDIRECTED.update(moved)
    return moved


def _writes_to(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike)) and bool(os.fspath(value)) and not os.path.isfile(value)


_FOLDER: list[str] = []


def _own_folder() -> str:
    """One folder for the process's redirected outputs, removed when it ends."""
    if not _FOLDER:
        _FOLDER.append(tempfile.mkdtemp(prefix="accel-trial-outputs-"))
        atexit.register(shutil.rmtree, _FOLDER[0], True)
    return _FOLDER[0]


def captured() -> list[dict[str, Any]]:
    return list(PARSERS.values())


def made() -> dict[str, Any]:
    """A trial record's `script_outputs`, where the script made anything under an output option that was
    redirected: by option, the path it was given and the folders and files made there (a file option's: that
    file)."""
    counted = {}
    for option, (given, path) in REDIRECTED.items():
        walked = list(os.walk(path))
        folders = sum(len(dirs) for _, dirs, _ in walked)
        files = sum(len(names) for _, _, names in walked) or int(os.path.isfile(path))
        if folders or files:
            counted[option] = {"given": given, "folders": folders, "files": files}
    return {"script_outputs": counted} if counted else {}


def described(parser: argparse.ArgumentParser, parsed: argparse.Namespace, strict: bool) -> dict[str, Any]:
    """The parser as data: `strict` when the script refuses what it does not know (parse_args)."""
    return {
        "prog": parser.prog,
        "strict": strict,
        "prefix_chars": parser.prefix_chars,
        "actions": [_action(action, parsed) for action in parser._actions if action.option_strings],
        "exclusive": [
            [action.option_strings[0] for action in group._group_actions if action.option_strings]
            for group in parser._mutually_exclusive_groups
        ],
    }


def _action(action: argparse.Action, parsed: argparse.Namespace) -> dict[str, Any]:
    return {
        "options": list(action.option_strings),
        "dest": action.dest,
        "kind": _kind(action),
        "nargs": action.nargs,
        "const": _plain(action.const),
        "choices": _plain(list(action.choices)) if isinstance(action.choices, (list, tuple, range)) else None,
        "type": getattr(action.type, "__name__", None) if action.type is not None else None,
        "default": _plain(action.default),
        "value": _plain(getattr(parsed, action.dest, None)),
        "help": action.help if isinstance(action.help, str) else None,
    }


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse.BooleanOptionalAction):
        return "boolean_optional"
    if isinstance(action, argparse._StoreTrueAction):
        return "store_true"
    if isinstance(action, argparse._StoreFalseAction):
        return "store_false"
    return "flag" if action.nargs == 0 else "store"  # store_const, count, help, version; or one taking values


def _plain(value: Any) -> Any:
    """A value as JSON holds it: a number, text, boolean or None as it is, a list of them, anything else its text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)
