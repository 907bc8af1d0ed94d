"""`accel bench -- python train.py ARGS`: the A/B report of a user's own script, each trial a fresh process of it.

A variant is the script with `ACCEL_SET` items added (accel.engine.settings), with one of its own options set
(`--vary arg:--batch=16,32`) or with an environment variable set (`--vary env:OMP_NUM_THREADS=1,2`). Every trial
runs with accel's instrument loaded before the script's first line (accel/trial/instrument): a script that creates
an `accel.Engine` is measured by its engine (accel.engine.trial_variables), any other by the instrument, from its
optimizer steps. One probe comes first: the script runs until its engine sets the model up (what the engine was
given, the model's traits) or, without an engine, until its first optimizer step (the device, the model's traits),
and exits. That tells the ablation the script's speed-ups and which others this device and model can use
(`--ablate` tries both), validates every variant's settings in a second rather than in every trial, and stops a
script that never trains with one message before any trial runs. With `--warm-cache` the trials share one inductor
cache under OUT, as a recipe's do.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import extras
from ..engine import trial_variables
from ..engine.settings import SET_VARIABLE, engine_settings
from ..errors import AccelError, RecipeError
from ..quiet import quiet_logs
from .decide import Rounds
from .isolation import Room
from .knobs import runnable_speedups
from .plan import only_variants
from .probe_watch import ProbeWatch
from .records import Report
from .refused import new_refusals, script_device, script_refusals
from .runner import BenchRun, as_rounds, run_and_report, signals_as_ctrl_c
from .script_flags import found_said, framework_ablation
from .script_options import ScriptOptions, with_option
from .trial_process import TrialSettings, exit_reason, instrumented_pythonpath, log_tail, run_logged, trial_env
from .variants import (
    ARG,
    ENV,
    Variant,
    ablation_variants,
    describe,
    format_value,
    interleave,
    option_text,
    vary_variants,
)

CURVE_METRIC = "val_loss"  # what a script reports through eng.log for a target read from its own run
SCRIPT_TIMEOUT_S = 900.0  # a probe's or trial's limit without --timeout: a script is stopped, never left to train
NO_ENGINE_KEYS = (
    "variant `{name}` sets `{key}`, an accel.Engine setting, but `{command}` creates no accel.Engine: vary its own "
    "options (--vary arg:--OPTION=V1,V2) or environment variables (--vary env:NAME=V1,V2)."
)


@dataclass(frozen=True)
class ScriptLaunch:
    """One variant of the script: its command line and the `ACCEL_SET` items it runs with (the bench's `--set`
    first, then the variant's, after any the caller's environment has)."""

    command: tuple[str, ...]
    sets: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()  # --vary env:NAME=V: the variant's own environment variables
    preload: tuple[str, ...] = ()  # what its trials' zygote imports (the probe's; accel/bench/zygotes.py)

    def accel_set(self) -> str:
        return " ".join([os.environ.get(SET_VARIABLE, ""), *map(shlex.quote, self.sets)]).strip()

    def shell_line(self, *variables: str) -> str:
        """The line a user types to run it: its environment variables, `variables`, ACCEL_SET, the command."""
        own = [f"{name}={shlex.quote(value)}" for name, value in self.env]
        accel_set = [f"{SET_VARIABLE}={shlex.quote(self.accel_set())}"] if self.accel_set() else []
        return " ".join([*own, *variables, *accel_set, shlex.join(self.command)])

    def settings(self) -> str:
        """Its ACCEL_SET items and environment variables (its options are in its command)."""
        said = [*self.sets, *(f"{name}={value}" for name, value in self.env)]
        return " ".join(map(shlex.quote, said)) or "the script as given"

    def launch(self, settings: TrialSettings, json_path: Path) -> tuple[list[str], dict[str, str]]:
        """The command and the variables that make it a trial: its engine's (accel.engine.trial_variables), or the
        instrument's, loaded before its first line (accel.trial.instrument)."""
        return list(self.command), {
            **dict(self.env),
            "PYTHONPATH": instrumented_pythonpath(),
            SET_VARIABLE: self.accel_set(),
            trial_variables.PATH: str(json_path),
            trial_variables.STEPS: str(settings.steps),  # 0: the script's own run (tune --objective time)
            trial_variables.WARMUP: str(settings.warmup),
            **({trial_variables.TARGET: settings.target} if settings.target else {}),
            **({trial_variables.STOP: "1"} if settings.stop_at_target else {}),
            **({trial_variables.DEADLINE: repr(settings.deadline_s)} if settings.deadline_s is not None else {}),
            **({trial_variables.CURVE: CURVE_METRIC} if settings.curve else {}),
            **({trial_variables.SYNC: settings.sync} if settings.sync != "step" else {}),
            **({trial_variables.WINDOW: repr(settings.window)} if settings.window else {}),
            **({trial_variables.PATTERNS: json.dumps(settings.metric_patterns)} if settings.metric_patterns else {}),
        }


@dataclass
class ScriptPlan:
    """What a bench of a script will run: the variants, each one's launch, and what the script's engine was given."""

    command: list[str]
    name: str
    variants: list[Variant]
    baseline: str
    launches: dict[str, ScriptLaunch]
    configs: dict[str, dict[str, Any]]  # each variant's settings as its engine will resolve them
    given: dict[str, Any]
    refused: dict[str, str] = field(default_factory=dict)  # variants the conflict rule refuses: not run
    found: list[str] = field(default_factory=list)  # a plain script's speed switches, where from, and those left out

    def listed(self) -> str:
        """`--list`: the variants, those refused with why, and the speed switches found."""
        refused = [f"refused, not run: {name}: {why}" for name, why in self.refused.items()]
        return "\n".join([describe(self.variants), *refused, *self.found])


def plan_script(
    command: list[str],
    sets: list[str],
    ablate: bool,
    vary: list[str],
    only: list[str] | None = None,
    timeout: float | None = None,
    cwd: Path | None = None,
) -> ScriptPlan:
    """Probe the script (run in `cwd`: a revision's checkout), build the variants (--ablate over its engine's
    speed-ups, or --vary over engine keys) and resolve each one's settings up front."""
    if ablate == bool(vary):
        raise AccelError(
            "accel bench needs exactly one of --ablate (every speed-up of the script's engine on/off) or --vary "
            "KEY=V1,V2 over engine keys (repeatable), e.g. --vary speedups.amp.dtype=bf16,fp16."
        )
    given = probe(command, sets, timeout, cwd)
    variants, skipped = _ablation(given, command) if ablate else (vary_variants(vary), {})
    if only:
        variants = only_variants(variants, only)
    options = ScriptOptions.of(given)
    launches = {v.name: launch_of(command, sets, v, options, given.get("preload", ())) for v in variants}
    baseline = variants[0].name
    if not uses_engine(given):
        configs = {v.name: unchanged_script(launches[v.name], v, command) for v in variants}
        refused = {name: reason for name, reason in skipped.items() if name in launches}
        refused |= _parser_refusals(options, [v for v in variants if v.name not in refused], ablate)
        found = found_said(given, command) if ablate else []
        return ScriptPlan(command, script_name(command), variants, baseline, launches, configs, given, refused, found)
    configs = {name: resolved(given, launch, name) for name, launch in launches.items()}
    refused = new_refusals({name: script_refusals(given, config) for name, config in configs.items()}, baseline)
    return ScriptPlan(command, script_name(command), variants, baseline, launches, configs, given, refused)


def _parser_refusals(options: ScriptOptions | None, variants: list[Variant], ablate: bool) -> dict[str, str]:
    """The variants the script's own parser would refuse, in its words: a --vary value it refuses is an error
    before anything runs (as a recipe value that does not validate is); an ablation's is refused, not run."""
    refused = {}
    for variant in variants if options else ():
        said = options.variant_refusal(variant.overrides)
        if said and not ablate:
            raise AccelError(f"variant `{variant.name}`: the script's parser refuses it, so no trial would run: {said}")
        if said:
            refused[variant.name] = f"the script's parser refuses it: {said}"
    return refused


def uses_engine(given: dict[str, Any]) -> bool:
    """Whether the probe met an accel.Engine (else the instrument measures the script unchanged)."""
    return given.get("engine", True)


def unchanged_script(launch: ScriptLaunch, variant: Variant, command: list[str]) -> dict[str, Any]:
    """A variant of a script without an engine: its command line and environment; engine keys are refused."""
    for key in variant.overrides:
        if not key.startswith((ARG, ENV)):
            raise AccelError(NO_ENGINE_KEYS.format(name=variant.name, key=key, command=shlex.join(command)))
    return {"command": shlex.join(launch.command), "env": dict(launch.env)}


def script_name(command: list[str]) -> str:
    """The script's file name without `.py` (`train` for `python train.py`): the default output folder's name."""
    return Path(next((c for c in command if c.endswith(".py")), command[0])).stem


def _ablation(given: dict[str, Any], command: list[str]) -> tuple[list[Variant], dict[str, str]]:
    """The speed-ups the script's engine was given, and those tune would try that this device can run and the
    model can use (its traits, from the probe); without an engine, an HF or LightningCLI script's Trainer flags,
    or the speed switches among any other script's own options. With the variants skipped here and why (reported
    as refused, not run)."""
    if not uses_engine(given):
        variants, skipped = framework_ablation(given, command)
        return variants + [Variant(name) for name in skipped], skipped
    device = script_device(given)
    added = runnable_speedups(given["speedups"], device, given.get("model_traits"))
    try:
        return ablation_variants(given["speedups"], added), {}
    except RecipeError:
        raise AccelError(
            f"--ablate needs speed-ups: the script's accel.Engine was given none (its `speedups=`, with "
            f"ACCEL_SET/ACCEL_SPEEDUPS and --set applied), and none that it was not given runs on {device} with "
            "this model. Compare settings with --vary, e.g. --vary speedups.amp.enabled=false,true."
        ) from None


def launch_of(
    command: list[str],
    sets: list[str],
    variant: Variant,
    options: ScriptOptions | None = None,
    preload: Sequence[str] = (),
) -> ScriptLaunch:
    """The variant's engine keys go to ACCEL_SET; its `arg:--OPTION` keys set the script's own option (as its
    parser's `options` take it, where known), its `env:NAME` keys an environment variable; `preload`: what the
    probe found its trials' zygote may import."""
    items, env = [], []
    for key, value in variant.overrides.items():
        if key.startswith(ENV):
            if value is not None:
                env.append((_env_name(key[len(ENV) :]), format_value(value)))
        elif key.startswith(ARG):
            if value is not None:  # None: the option as the command has it (or not at all)
                command = with_option(command, key[len(ARG) :], option_text(value), options)
        else:  # a section (a speed-up's whole config, from tune) as JSON, which the YAML of ACCEL_SET reads back
            text = json.dumps(value) if isinstance(value, (dict, list)) else format_value(value)
            items.append(f"{key}={text}")
    return ScriptLaunch(tuple(command), (*sets, *items), tuple(env), tuple(preload))


def _env_name(name: str) -> str:
    if not name.isidentifier():
        raise AccelError(f"--vary {ENV}{name}: name an environment variable, e.g. --vary {ENV}OMP_NUM_THREADS=1,2.")
    return name


def resolved(given: dict[str, Any], launch: ScriptLaunch, name: str) -> dict[str, Any]:
    """The variant's settings as its engine will resolve them (validated here: a bad key fails now)."""
    env = {SET_VARIABLE: " ".join(map(shlex.quote, launch.sets))}
    try:
        with quiet_logs("accel"):  # the engine logs each override it applies: in a trial news, here noise
            settings = engine_settings(
                given["speedups"], given["device"], given["strategy"], env=env, optimizer=given.get("optimizer")
            )
    except RecipeError as err:
        raise RecipeError(f"variant `{name}`: {err}") from None
    speedups = {key: config.model_dump(mode="json") for key, config in settings.speedups.items()}
    return {
        "command": shlex.join(launch.command),
        SET_VARIABLE: launch.accel_set(),
        "speedups": speedups,
        "device": settings.device,
        "optimizer": settings.optimizer,
    }


def probe(command: list[str], sets: list[str], timeout: float | None = None, cwd: Path | None = None) -> dict[str, Any]:
    """What the script trains with: the script runs until its engine sets the model up (what the engine was given:
    speed-ups, device, strategy) or, without an engine, until its first optimizer step (the instrument: device,
    model), which writes it and exits. While it runs, a line says what it waits for (accel.bench.probe_watch);
    Ctrl-C or SIGTERM ends it and says so. A script that never trains fails here, with its last output."""
    limit = timeout or SCRIPT_TIMEOUT_S
    line = shlex.join(command)
    with tempfile.TemporaryDirectory(prefix="accel-probe-") as folder:
        path, log_path = Path(folder) / "given.json", Path(folder) / "probe.log"
        env = trial_env(Path(folder) / "cache") | {
            SET_VARIABLE: ScriptLaunch(tuple(command), tuple(sets)).accel_set(),
            "PYTHONPATH": instrumented_pythonpath(),
            trial_variables.PATH: str(path),
            trial_variables.PROBE: "1",
        }
        watch, started = ProbeWatch(path, limit), time.monotonic()
        room = Room(command, cwd, Path(tempfile.gettempdir(), "accel-left-behind", "probe"))
        print(  # at once: a script's imports alone can take half a minute before anything else is said
            f"probe: running the script until it starts training, to see what it trains with (stopped at {limit:g} s)",
            file=sys.stderr,
            flush=True,
        )
        try:
            with signals_as_ctrl_c():
                code = run_logged(command, log_path, env, limit, cwd, watch, room)
        except OSError as err:
            raise AccelError(f"cannot run `{line}`: {err}") from None
        except KeyboardInterrupt:
            print(
                f"probe: stopped after {time.monotonic() - started:.0f} s: `{line}` and the processes it started "
                "were ended before the probe was done; no trial ran",
                file=sys.stderr,
                flush=True,
            )
            raise
        if code is None:
            hint = "" if timeout else " (--timeout to wait longer)"
            raise AccelError(f"{watch.why_stopped(line, hint)}; last output:\n{log_tail(log_path)}")
        if path.is_file():
            given = json.loads(path.read_text())
            if "error" in given:  # the guard's: accel's recorder did not start (accel/trial/instrument/guard.py)
                raise AccelError(f"`{line}`: {given['error']} Last output:\n{log_tail(log_path)}")
            return given
        if code == 0:
            raise AccelError(f"{watch.ended_without_record(line)}\n{log_tail(log_path)}")
        tail = log_tail(log_path)
        raise AccelError(
            f"`{line}` {exit_reason(code)} before its first optimizer step; last output:\n"
            f"{tail}{_why_missing(command, tail)}"
        )


def _why_missing(command: list[str], tail: str) -> str:
    """Why the script could not import a module: a Python other than accel's, or an extra not installed."""
    if "ModuleNotFoundError" not in tail:
        return ""
    return _other_python(command) or extras.hint(tail)


def _other_python(command: list[str]) -> str:
    """Why a module may be missing: the command's `python` is found on PATH, and outside accel's own environment
    (the venv not activated) it may lack torch or accel."""
    found = shutil.which(command[0]) if Path(command[0]).name.startswith("python") else None
    if found is None or Path(found).parent.resolve() == Path(sys.executable).parent.resolve():
        return ""
    return (
        f"\n`{command[0]}` is {found}, not the Python accel runs in ({sys.executable}): activate accel's "
        f"environment, or leave out `{command[0]}` (`-- {shlex.join(command[1:])}` runs under accel's Python)."
    )


def run_script_bench(
    plan: ScriptPlan,
    out: str | Path,
    settings: TrialSettings,
    trials: int | Rounds,
    command: str | None = None,
    console: Console | None = None,
) -> tuple[Report, dict[str, Path]]:
    """Run the script's variants interleaved, each trial a fresh process; write report.json/.md/.html into `out`."""
    rounds = as_rounds(trials)
    trials = rounds.pilot
    jobs = [
        (t, v.name, plan.launches[v.name]) for t, v in interleave(plan.variants, trials) if v.name not in plan.refused
    ]
    source = shlex.join(plan.command)
    run = BenchRun(
        plan.variants, plan.baseline, source, plan.configs, settings, trials, command, plan.refused, plan.command
    )
    run.rounds = rounds
    return run_and_report(run, jobs, Path(out), console)
