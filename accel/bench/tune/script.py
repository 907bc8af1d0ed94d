"""`accel tune -- python train.py ARGS`: tune's stages on a user's own script, each trial a fresh process of it
(accel.bench.script) whose engine measures itself (accel.trial.engine_agent); docs/bench.md says how it is run.

- Speed (the default): the speed-ups the device runs, one knob each as for a recipe, starting from those the
  script's engine was given; then the script's batch-size option, when named (`--batch-arg`), and any `--try`
  key (an engine key, or `arg:--OPTION`). The result is the whole `speedups:` section to run with
  (`ACCEL_SPEEDUPS=FILE` replaces the script's own) and the command line that runs it.
- Time: the speed-ups as for speed (short trials, by samples/s), kept when together they reach the target
  sooner (accel.bench.tune.levers), then what changes learning on top of them. The optimizer (`optimizer=muon`:
  the engine builds Muon and AdamW from the script's own optimizer), then the script's learning-rate option (half
  and twice its value) and its batch-size option (half, 1x, 2x, the learning rate scaled by the square root, as
  for AdamW and Muon), each named by the user and given a value on the command line. Each of these trials runs
  the script to its own end (or its target).
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ...devices import resolve_device
from ...errors import AccelError
from ...io import write_atomic
from ..knobs import Knob, _listed, _tried, current, lookup, muon_beside_the_kernel, speedup_knobs
from ..records import Trial
from ..refused import script_refusals
from ..script import SET_VARIABLE, launch_of, probe, resolved, uses_engine
from ..script_flags import FRAMEWORKS, flag_knobs, given_flags, plain_switches
from ..script_options import ScriptOptions
from ..script_switches import options_of
from ..trial_process import Launch
from ..variants import ARG, ENV, Variant
from .search import TuneResult

OPTIMIZER = "optimizer"  # the engine key tune --objective time varies
NO_ENGINE_SETS = (
    "--set {sets} sets accel.Engine settings, and `{command}` creates no accel.Engine: tune its own options "
    "(--batch-arg, --try arg:--OPTION=V1,V2, --try env:NAME=V1,V2)."
)
GIVEN = "script"  # how the fragment's comments name the configuration as given


@dataclass
class ScriptSubject:
    """A script as tune measures it: its command, the bench's --set items and what its engine was given."""

    command: list[str]
    sets: list[str]
    engine: dict[str, Any]  # the probe's answer: speed-ups, device, strategy, optimizer
    given = "script as given"

    @classmethod
    def probed(cls, command: list[str], sets: list[str], timeout: float | None = None) -> ScriptSubject:
        given = probe(command, sets, timeout)
        if uses_engine(given):
            return cls(list(command), list(sets), given)
        if sets:
            raise AccelError(NO_ENGINE_SETS.format(command=shlex.join(command), sets=" ".join(sets)))
        return UnchangedScript(list(command), [], given)

    def plain(self) -> dict[str, Any]:
        """The engine's settings and the script's options as its command gives them (`arg:--lr`: 0.003)."""
        options = {f"{ARG}{k}": v for k, v in options_of(self.command).items()}
        return {**{k: self.engine.get(k) for k in ("speedups", "device", "strategy", OPTIMIZER)}, **options}

    def effective(self, overrides: dict[str, Any]) -> dict[str, Any]:
        plain = self.plain()
        return {k: v for k, v in overrides.items() if lookup(plain, k) != v}

    def launch(self, overrides: dict[str, Any], name: str = "variant") -> Launch:
        options = ScriptOptions.of(self.engine)
        variant = Variant(name, self.effective(overrides))
        return launch_of(self.command, self.sets, variant, options, self.engine.get("preload", ()))

    def config_key(self, overrides: dict[str, Any]) -> str:
        """The command and the settings its engine resolves (validated: a bad key fails here, before a trial)."""
        data = resolved(self.engine, self.launch(overrides), "variant")
        data.pop(SET_VARIABLE)  # the same settings, however ACCEL_SET spells them
        data["speedups"] = {k: v for k, v in data["speedups"].items() if v.get("enabled", True)}
        return json.dumps(data, sort_keys=True, default=str)

    def inputs(self, variants: list[Variant], out: Path) -> dict[str, Launch]:
        return {v.name: self.launch(v.overrides, v.name) for v in variants}

    def planned_steps(self, trials: list[Trial]) -> int | None:
        return None  # the script's run length is its own: a compile candidate's break-even is not checked

    def refusals(self, overrides: dict[str, Any]) -> list[str]:
        """Judged by the run's facts the probe read from the script's engine (none known: none refused for them)."""
        return script_refusals(self.engine, resolved(self.engine, self.launch(overrides), "variant"))


class UnchangedScript(ScriptSubject):
    """A script without an accel.Engine (accel.trial.instrument measures it): its own options and its speed flags
    (a Hugging Face or LightningCLI script's Trainer flags, or its own speed switches), as given; no engine setting
    to resolve or refuse."""

    def plain(self) -> dict[str, Any]:
        flags = {f"{ARG}--{name}": value for name, value in given_flags(self.engine, self.command).items()}
        return {**flags, **{f"{ARG}{k}": v for k, v in options_of(self.command).items()}}

    def config_key(self, overrides: dict[str, Any]) -> str:
        launch = self.launch(overrides)
        return json.dumps({"command": launch.command, "env": launch.env})

    def refusals(self, overrides: dict[str, Any]) -> list[str]:
        """What the script's parser refuses of the choices together (two options of one mutually exclusive group)."""
        options = ScriptOptions.of(self.engine)
        said = options.variant_refusal(self.effective(overrides)) if options else None
        return [f"the script's parser refuses it: {said}"] if said else []


def _option(subject: ScriptSubject, flag: str, name: str) -> tuple[str, Any]:
    """`arg:OPTION` and its value in the command, which the search needs to start from."""
    if not name.startswith("--"):
        raise AccelError(f"{flag} {name}: name the script's option with its dashes, e.g. {flag}=--{name.lstrip('-')}.")
    value = options_of(subject.command).get(name)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise AccelError(
            f"{flag}={name}: give the script's {name} a positive value on its command line (`... {name} VALUE`); "
            f"tune varies it from there, and the script's own default is not visible from outside. "
            f"Command: {shlex.join(subject.command)}"
        )
    return f"{ARG}{name}", value


def speed_knobs(
    subject: ScriptSubject, speedups: bool, batch_arg: str | None, batch_sizes: str | None, tries: list[str]
) -> list[Knob]:
    """The speed-up knobs the device runs (without an engine: its Trainer's speed flags), then the script's batch
    size (half to 4x), then `--try` keys."""
    knobs = _speed_flags(subject) if speedups else []
    if batch_arg:
        key, b = _option(subject, "--batch-arg", batch_arg)
        knobs.append(Knob(key, _sizes(key, _listed(batch_sizes, [max(1, b // 2), b, 2 * b, 4 * b])), bounded=True))
    return [k for k in knobs + _tries(subject, tries) if k.values]


def _speed_flags(subject: ScriptSubject) -> list[Knob]:
    if isinstance(subject, UnchangedScript):
        if subject.engine.get("framework") not in FRAMEWORKS and not plain_switches(subject.engine, subject.command)[0]:
            return []  # a plain loop with no speed switch of its own: its batch size and --try keys
        knobs, skipped = flag_knobs(subject.engine, subject.command)
        for name, why in skipped.items():
            print(f"{name}: not tried: {why}", file=sys.stderr)
        return knobs
    return speedup_knobs(subject.engine["speedups"], resolve_device(subject.engine["device"]))


def _tries(subject: ScriptSubject, tries: list[str]) -> list[Knob]:
    """`--try` keys; a script without an engine takes its own options and environment only."""
    knobs = _tried(tries)
    if isinstance(subject, UnchangedScript):
        for knob in knobs:
            if not knob.key.startswith((ARG, ENV)):
                raise AccelError(
                    f"--try {knob.key}=...: an accel.Engine setting, and `{shlex.join(subject.command)}` creates no "
                    "accel.Engine: try its own options (arg:--OPTION) or environment variables (env:NAME)."
                )
    options = ScriptOptions.of(subject.engine)
    for knob in knobs if options else ():
        for value in knob.values:
            said = options.variant_refusal({knob.key: value})
            if said:
                refused = f"the script's parser refuses it, so no trial would run: {said}"
                raise AccelError(f"--try {knob.key}={value}: {refused}")
    return knobs


def time_knobs(
    subject: ScriptSubject,
    lr_arg: str | None,
    batch_arg: str | None,
    batch_sizes: str | None,
    tries: list[str],
    speedups: bool = False,
) -> list[Knob]:
    """With `speedups`, the speed-up knobs the device runs (without an engine: its Trainer's speed flags), searched
    by samples/s and then run together to the target (accel/bench/tune/levers.py); then Muon (built by the
    engine from the script's optimizer), the script's learning rate, its batch size with the learning rate
    scaled to it, then `--try` keys."""
    knobs = _speed_flags(subject) if speedups else []
    muon = not isinstance(subject, UnchangedScript) and subject.engine.get(OPTIMIZER) != "muon"  # the engine builds it
    knobs += [Knob(OPTIMIZER, ["muon"], couple=muon_beside_the_kernel)] if muon else []
    lr_key = None
    if lr_arg:
        lr_key, lr = _option(subject, "--lr-arg", lr_arg)
        knobs.append(Knob(lr_key, [_round(lr / 2), _round(lr * 2)], ladder=2.0))
    if batch_arg:
        key, b = _option(subject, "--batch-arg", batch_arg)
        sizes = _sizes(key, _listed(batch_sizes, [max(1, b // 2), b, 2 * b]))
        knobs.append(Knob(key, sizes, bounded=True, couple=_scaled_lr(key, lr_key) if lr_key else None))
    return [k for k in knobs + _tries(subject, tries) if k.values]


def _sizes(key: str, sizes: list[Any]) -> list[Any]:
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes):
        raise AccelError(f"{key} candidates must be positive integers, got {sizes}.")
    return sizes


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def _scaled_lr(batch_key: str, lr_key: str):
    """A batch size carries the learning rate scaled by the square root of its ratio (Malladi et al., 2022, for
    adaptive optimizers: the script's optimizer is its own, so that is the assumption)."""

    def couple(batch: int, chosen: dict[str, Any], plain: dict) -> dict[str, Any]:
        before, lr = current(batch_key, chosen, plain), current(lr_key, chosen, plain)
        return {lr_key: lr if batch == before else _round(lr * (batch / before) ** 0.5)}

    return couple


def tuned_speedups(subject: ScriptSubject, chosen: dict[str, Any]) -> dict[str, Any]:
    """The whole `speedups:` section to run with: the script's, with the chosen speed-ups, those off left out
    (ACCEL_SPEEDUPS replaces the script's section: absent is off)."""
    section = json.loads(json.dumps(subject.engine["speedups"]))
    for key, value in chosen.items():
        parts = key.split(".")
        if parts[0] != "speedups" or len(parts) < 2:
            continue
        node = section
        for part in parts[1:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return {name: cfg for name, cfg in section.items() if not (isinstance(cfg, dict) and cfg.get("enabled") is False)}


def run_line(subject: ScriptSubject, chosen: dict[str, Any], fragment: Path) -> str:
    """The command that runs the script with the chosen settings."""
    launch = subject.launch({k: v for k, v in chosen.items() if not k.startswith("speedups.")})
    if isinstance(subject, UnchangedScript):
        return launch.shell_line()
    return launch.shell_line(f"ACCEL_SPEEDUPS={shlex.quote(str(fragment))}")


def write_script_fragment(
    result: TuneResult, subject: ScriptSubject, path: Path, comments: list[str]
) -> tuple[Path, str]:
    """The `speedups:` section to run with (without an engine: the command), headed by `comments` and the command
    line; (its path, the line)."""
    from .output import choice_line, final_lines

    path = Path(path)
    line = run_line(subject, result.chosen, path)
    plain = subject.plain()
    comments = [
        *comments,
        *(choice_line(result, plain, key, value, GIVEN) for key, value in result.chosen.items()),
        *final_lines(result, GIVEN),
        "Run with:",
        f"  {line}",
    ]
    header = "".join(f"# {text}\n" for text in comments)
    if isinstance(subject, UnchangedScript):  # no engine, no speed-ups section: the command is the result
        body = yaml.safe_dump({"command": line}, sort_keys=False, width=10**6)
    else:
        body = yaml.safe_dump({"speedups": tuned_speedups(subject, result.chosen)}, sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, header + body), line


def comments(result: TuneResult, command: str, settings: Any, trials: int) -> list[str]:
    """The fragment's head: who wrote it, where and how it measured, and the rule a value had to pass."""
    import time

    from ...measure.load import busy_note
    from ..summary import MIN_TRIALS
    from .output import NOTHING_MEASURED, speedups_rule

    lines = [f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M')}."]
    if not result.compared and result.final is None:
        return [*lines, NOTHING_MEASURED]
    busy, env = busy_note(result.loads), result.env
    lines += [f"BUSY MACHINE: {busy}"] if busy else []
    where = (
        f"Measured on {env.get('device', 'this machine')}, torch {env.get('torch', '?')}: each candidate ran "
        f"{result.trials_ran(trials)}"
    )
    if result.target:
        run = f"{settings.steps} optimizer steps" if settings.steps else "its own run"
        return [
            *lines,
            f"{where} trial(s), each a fresh process of the script over {run}, timed from its start to {result.target}"
            " (its evaluations excluded), the target read from the script as given unless --target set it.",
            *speedups_rule(result),
            f"A value replaced the previous choice only when it reached the target measurably sooner (its 95% "
            f"interval of the time ratio below 1.0x, at least {MIN_TRIALS} trials, every one at the target).",
        ]
    return [
        *lines,
        f"{where} trial(s) in fresh processes of the script, {settings.steps} timed steps after {settings.warmup} "
        "warm-up.",
        f"A value replaced the previous choice only when measurably faster (its 95% interval above 1.0x, by mean "
        f"samples/s and by median step time both, at least {MIN_TRIALS} trials, none failed).",
    ]
