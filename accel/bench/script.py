"""`accel bench -- python train.py ARGS`: the A/B report of a user's own script, each trial a fresh process of it.

A variant is the script with `ACCEL_SET` items added (accel.engine.settings), or with one of its own options set
(`--vary arg:--batch=16,32`), and its engine measures its own steps (accel.engine.script_trial). One probe comes
first: the
script runs until its `accel.Engine` sets the model up, which writes what the engine was given (speed-ups, device)
and the model's traits, and exits. That tells the ablation the script's speed-ups and which others this device
and model can use (`--ablate` tries both), validates every variant's settings in a second rather than in every
trial, and stops a script without an engine with one message before any trial runs. With `--warm-cache` the
trials share one inductor cache under OUT, as a recipe's do.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from ..engine import script_trial
from ..engine.settings import SET_VARIABLE, engine_settings
from ..errors import AccelError, RecipeError
from ..runs.signals import die_with_parent
from .knobs import runnable_speedups
from .plan import only_variants
from .records import Report
from .refused import new_refusals, script_device, script_refusals
from .runner import BenchRun, run_and_report
from .trial_process import TrialSettings, exit_reason, log_tail, trial_env
from .variants import Variant, ablation_variants, format_value, interleave, vary_variants

ARG = "arg:"  # --vary arg:--batch=16,32: the script's own option, not an engine key
CURVE_METRIC = "val_loss"  # what a script reports through eng.log for a target read from its own run
NO_ENGINE = (
    "`accel.Engine` not used: `{command}` ran to its end without creating an accel.Engine, so no trial record was "
    "written. accel bench, tune and profile measure a script through its engine: create one and set the model up "
    "with it (docs/own-loop.md), or give them a recipe."
)


@dataclass(frozen=True)
class ScriptLaunch:
    """One variant of the script: its command line and the `ACCEL_SET` items it runs with (the bench's `--set`
    first, then the variant's, after any the caller's environment has)."""

    command: tuple[str, ...]
    sets: tuple[str, ...]

    def accel_set(self) -> str:
        return " ".join([os.environ.get(SET_VARIABLE, ""), *map(shlex.quote, self.sets)]).strip()

    def launch(self, settings: TrialSettings, json_path: Path) -> tuple[list[str], dict[str, str]]:
        """The command and the variables that make its engine a trial (accel.engine.script_trial)."""
        return list(self.command), {
            SET_VARIABLE: self.accel_set(),
            script_trial.PATH: str(json_path),
            script_trial.STEPS: str(settings.steps),  # 0: the script's own run (tune --objective time)
            script_trial.WARMUP: str(settings.warmup),
            **({script_trial.TARGET: settings.target} if settings.target else {}),
            **({script_trial.STOP: "1"} if settings.stop_at_target else {}),
            **({script_trial.CURVE: CURVE_METRIC} if settings.curve else {}),
            **({script_trial.SYNC: settings.sync} if settings.sync != "step" else {}),
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


def plan_script(
    command: list[str],
    sets: list[str],
    ablate: bool,
    vary: list[str],
    only: list[str] | None = None,
    timeout: float | None = None,
) -> ScriptPlan:
    """Probe the script, build the variants (--ablate over its engine's speed-ups, or --vary over engine keys) and
    resolve each one's settings up front."""
    if ablate == bool(vary):
        raise AccelError(
            "accel bench needs exactly one of --ablate (every speed-up of the script's engine on/off) or --vary "
            "KEY=V1,V2 over engine keys (repeatable), e.g. --vary speedups.amp.dtype=bf16,fp16."
        )
    given = probe(command, sets, timeout)
    variants = _ablation(given) if ablate else vary_variants(vary)
    if only:
        variants = only_variants(variants, only)
    launches = {v.name: launch_of(command, sets, v) for v in variants}
    configs = {name: resolved(given, launch, name) for name, launch in launches.items()}
    baseline = variants[0].name
    refused = new_refusals({name: script_refusals(given, config) for name, config in configs.items()}, baseline)
    return ScriptPlan(command, script_name(command), variants, baseline, launches, configs, given, refused)


def script_name(command: list[str]) -> str:
    """The script's file name without `.py` (`train` for `python train.py`): the default output folder's name."""
    return Path(next((c for c in command if c.endswith(".py")), command[0])).stem


def _ablation(given: dict[str, Any]) -> list[Variant]:
    """The speed-ups the script's engine was given, and those tune would try that this device can run and the
    model can use (its traits, from the probe)."""
    device = script_device(given)
    added = runnable_speedups(given["speedups"], device, given.get("model_traits"))
    try:
        return ablation_variants(given["speedups"], added)
    except RecipeError:
        raise AccelError(
            f"--ablate needs speed-ups: the script's accel.Engine was given none (its `speedups=`, with "
            f"ACCEL_SET/ACCEL_SPEEDUPS and --set applied), and none that it was not given runs on {device} with "
            "this model. Compare settings with --vary, e.g. --vary speedups.amp.enabled=false,true."
        ) from None


def launch_of(command: list[str], sets: list[str], variant: Variant) -> ScriptLaunch:
    """The variant's engine keys go to ACCEL_SET; its `arg:--OPTION` keys set the script's own option."""
    items = []
    for key, value in variant.overrides.items():
        if key.startswith(ARG):
            if value is not None:  # None: the option as the command has it (or not at all)
                command = with_option(command, key[len(ARG) :], format_value(value))
        else:  # a section (a speed-up's whole config, from tune) as JSON, which the YAML of ACCEL_SET reads back
            text = json.dumps(value) if isinstance(value, (dict, list)) else format_value(value)
            items.append(f"{key}={text}")
    return ScriptLaunch(tuple(command), (*sets, *items))


def with_option(command: list[str], option: str, value: str) -> list[str]:
    """`command` with the script's `option` set to `value`: replaced where given (`--batch 8`, `--batch=8`),
    appended where not."""
    if not option.startswith("-"):
        raise AccelError(
            f"--vary {ARG}{option}: name the script's option with its dashes, e.g. --vary {ARG}--batch=16,32."
        )
    command = list(command)
    for i, token in enumerate(command):
        if token == option and i + 1 < len(command):
            command[i + 1] = value
            return command
        if token.startswith(f"{option}="):
            command[i] = f"{option}={value}"
            return command
    return [*command, option, value]


def resolved(given: dict[str, Any], launch: ScriptLaunch, name: str) -> dict[str, Any]:
    """The variant's settings as its engine will resolve them (validated here: a bad key fails now)."""
    env = {SET_VARIABLE: " ".join(map(shlex.quote, launch.sets))}
    try:
        with _quiet():
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


@contextmanager
def _quiet():
    """The engine logs each override it applies: in a trial that is news, in the plan it would be noise."""
    logger = logging.getLogger("accel")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def probe(command: list[str], sets: list[str], timeout: float | None = None) -> dict[str, Any]:
    """What the script's engine was given (speed-ups, device, strategy): the script runs until it creates its
    engine, which writes them and exits (accel.engine.script_trial). A script that never creates one fails here."""
    with tempfile.TemporaryDirectory(prefix="accel-probe-") as folder:
        path, log_path = Path(folder) / "given.json", Path(folder) / "probe.log"
        env = trial_env(Path(folder) / "cache") | {
            SET_VARIABLE: ScriptLaunch(tuple(command), tuple(sets)).accel_set(),
            script_trial.PATH: str(path),
            script_trial.PROBE: "1",
        }
        with log_path.open("w") as log:
            try:
                code = subprocess.run(
                    command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout, preexec_fn=die_with_parent
                ).returncode
            except subprocess.TimeoutExpired:
                raise AccelError(
                    f"`{shlex.join(command)}` created no accel.Engine within {timeout:g} s (--timeout)."
                ) from None
            except OSError as err:
                raise AccelError(f"cannot run `{shlex.join(command)}`: {err}") from None
        if path.is_file():
            return json.loads(path.read_text())
        if code == 0:
            raise AccelError(NO_ENGINE.format(command=shlex.join(command)))
        raise AccelError(
            f"`{shlex.join(command)}` {exit_reason(code)} before creating its accel.Engine; last output:\n"
            f"{log_tail(log_path)}"
        )


def run_script_bench(
    plan: ScriptPlan,
    out: str | Path,
    settings: TrialSettings,
    trials: int,
    command: str | None = None,
    console: Console | None = None,
) -> tuple[Report, dict[str, Path]]:
    """Run the script's variants interleaved, each trial a fresh process; write report.json/.md/.html into `out`."""
    jobs = [
        (t, v.name, plan.launches[v.name]) for t, v in interleave(plan.variants, trials) if v.name not in plan.refused
    ]
    source = shlex.join(plan.command)
    run = BenchRun(plan.variants, plan.baseline, source, plan.configs, settings, trials, command, plan.refused)
    return run_and_report(run, jobs, Path(out), console)
