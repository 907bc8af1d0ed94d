"""A bench of revisions: the revisions are one more axis of variants (docs/bench.md, "Did my change slow training
down?"), so the runner interleaves their trials and the summary reads them as it reads any variants.

Each revision's variant runs its trials in the revision's checkout (accel/bench/revisions.py): a script's command
and a recipe file inside the repository are taken from there. With --vary, every revision runs every combination
(`3f2a1bc,arg:--batch=8`), and each is read against the first revision's of the same values. A revision that
cannot start (no such recipe there, a probe that failed) is reported with its error; the others go on.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from ..config.recipe import load_recipe
from ..errors import AccelError
from .decide import Rounds
from .plan import resolve_variant, write_recipes
from .records import Report, RevisionRecord
from .refused import new_refusals, recipe_refusals
from .rev_compare import variant_name
from .revisions import Checkouts, Revision, command_in, relocated, trial_folder
from .runner import BenchRun, as_rounds, run_and_report
from .script import launch_of, plan_script, script_name
from .trial_process import TrialSettings
from .variants import ARG, ENV, Variant, interleave, vary_variants


@dataclass(frozen=True)
class Subject:
    """What is benched at each revision: a script's command, or a recipe; with `--set` and `--vary`."""

    command: list[str] | None
    recipe: str | None
    sets: list[str]
    vary: list[str]

    @property
    def name(self) -> str:
        return script_name(self.command) if self.command else Path(self.recipe).stem


def bench_revisions(
    subject: Subject,
    revisions: list[Revision],
    checkouts: Checkouts,
    out: Path,
    settings: TrialSettings,
    trials: int | Rounds,
    said: str,
    console: Console | None = None,
) -> Report:
    """Run the revisions' trials interleaved and write the report (each revision read against the first) in `out`."""
    rounds = as_rounds(trials)
    trials = rounds.pilot
    if subject.command:
        args = (subject.command, subject.sets, subject.vary, revisions, checkouts, settings, trials, said)
        run, jobs = script_revisions(*args)
    else:
        args = (subject.recipe, subject.sets, subject.vary, revisions, checkouts, out, settings, trials, said)
        run, jobs = recipe_revisions(*args)
    run.rounds = rounds
    return run_and_report(run, jobs, out, console)[0]


def combos(vary: list[str]) -> list[Variant]:
    """The --vary combinations every revision runs; without --vary, one with no overrides."""
    return vary_variants(vary) if vary else [Variant("")]


def record(revision: Revision) -> RevisionRecord:
    return RevisionRecord(
        spec=revision.spec,
        name=revision.name,
        label=revision.label,
        commit=revision.commit,
        subject=revision.subject,
        date=revision.date,
        **({"dirty": True} if revision.dirty else {}),
    )


def _pairs(revisions: list[Revision], sets: list[Variant]) -> list[tuple[str, str]]:
    first = revisions[0].name
    return [(variant_name(r.name, c.name), variant_name(first, c.name)) for r in revisions[1:] for c in sets]


def script_revisions(
    command: list[str],
    sets: list[str],
    vary: list[str],
    revisions: list[Revision],
    checkouts: Checkouts,
    settings: TrialSettings,
    trials: int,
    said: str,
) -> tuple[BenchRun, list]:
    """The run and the interleaved jobs of a script's revisions. The script is probed only when --vary names an
    engine key (which the probe validates); otherwise its trials say how it fails, if it does."""
    varied = combos(vary)
    probing = any(not key.startswith((ARG, ENV)) for c in varied for key in c.overrides)
    variants, launches, configs, cwds, failed, refused = [], {}, {}, {}, {}, {}
    for revision in revisions:
        checkout = checkouts.path(revision)
        cwd, there = trial_folder(checkouts.root, checkout), command_in(checkouts.root, checkout, command)
        plan, error = None, None
        if probing:
            try:
                plan = plan_script(there, sets, False, vary, None, settings.timeout, cwd)
            except AccelError as err:
                error = f"{revision.label}: {err}"
        for combo in varied:
            name = variant_name(revision.name, combo.name)
            variants.append(Variant(name, dict(combo.overrides)))
            launches[name], cwds[name] = launch_of(there, sets, combo), cwd
            configs[name] = plan.configs[combo.name] if plan else _script_config(command, combo, revision)
            if error:
                failed[name] = error
            elif plan and combo.name in plan.refused:
                refused[name] = plan.refused[combo.name]
    jobs = [(t, v.name, launches[v.name]) for t, v in interleave(variants, trials) if v.name not in failed | refused]
    run = BenchRun(variants, variants[0].name, shlex.join(command), configs, settings, trials, said, refused, command)
    _as_revisions(run, revisions, varied, cwds, failed)
    return run, jobs


def _script_config(command: list[str], combo: Variant, revision: Revision) -> dict[str, Any]:
    return {"command": shlex.join(command), "revision": revision.commit or revision.spec, "overrides": combo.overrides}


def recipe_revisions(
    recipe: str,
    sets: list[str],
    vary: list[str],
    revisions: list[Revision],
    checkouts: Checkouts,
    out: Path,
    settings: TrialSettings,
    trials: int,
    said: str,
) -> tuple[BenchRun, list]:
    """The run and the interleaved jobs of a recipe's revisions: the recipe file (a shipped name is the same for
    every revision), the modules it imports from the current folder, each from the revision's checkout."""
    varied = combos(vary)
    variants, recipes, cwds, failed = [], {}, {}, {}
    for revision in revisions:
        checkout = checkouts.path(revision)
        path = relocated(checkouts.root, checkout, Path(recipe)) if Path(recipe).exists() else recipe
        names = [variant_name(revision.name, c.name) for c in varied]
        variants += [Variant(n, dict(c.overrides)) for n, c in zip(names, varied)]
        cwds |= dict.fromkeys(names, trial_folder(checkouts.root, checkout))
        try:
            with _import_roots_kept():  # one revision's folders must not reach another's trials
                base = load_recipe(path, sets)
                recipes |= {n: resolve_variant(base, c) for n, c in zip(names, varied)}
        except AccelError as err:
            failed |= dict.fromkeys(names, f"{revision.label}: {err}")
    refusals = {name: recipe_refusals(r) for name, r in recipes.items()}
    refused = new_refusals(refusals, next(iter(refusals))) if refusals else {}  # beyond the first one's own
    files = write_recipes(recipes, out)
    skip = failed | refused
    jobs = [(t, v.name, files[v.name]) for t, v in interleave(variants, trials) if v.name not in skip]
    configs = {name: r.dump() for name, r in recipes.items()}
    run = BenchRun(variants, variants[0].name, recipe, configs, settings, trials, said, refused)
    _as_revisions(run, revisions, varied, cwds, failed)
    return run, jobs


def _as_revisions(run: BenchRun, revisions: list[Revision], varied: list[Variant], cwds, failed) -> None:
    run.cwds, run.failed, run.revisions = cwds, failed, [record(r) for r in revisions]
    run.pairs = _pairs(revisions, varied)


@contextmanager
def _import_roots_kept() -> Iterator[None]:
    """Loading a recipe makes the folders of its modules importable here and in every trial (PYTHONPATH): put
    both back, so each revision's trials import from their own checkout (their current folder)."""
    path, env = list(sys.path), os.environ.get("PYTHONPATH")
    try:
        yield
    finally:
        sys.path[:] = path
        if env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env
