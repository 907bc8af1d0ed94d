"""tune's learning-knob stages on an Optuna study, so that several workers share them and a rerun continues them.

A stage's trials are run in rounds (round t: trial t of every candidate, interleaved, on one worker), and each round
is one trial of an Optuna study of its own, `NAME/STAGE-DIGEST` (the digest of its jobs and settings: a stage that
would run other configurations is another study). The stage's study samples its rounds with Optuna's GridSampler,
records each round's accel trials in its trial's user attributes and keeps them in the storage (SQLite by default,
beside the tune's output), so a worker anywhere (`accel tune --join URL`, accel.bench.tune.workers) takes the next
round, a rerun skips the rounds already COMPLETE, and a round whose worker stopped answering (no heartbeat for the
grace period) is marked FAIL by Optuna and run again. The choice stays accel's: every round's trials are read back
and judged by the stage's rule, on the machine that runs the search. A round runs on one machine, so its candidates
are compared only with a reference measured beside them, on the same machine (a study whose rounds came from
machines of different fingerprints says so); Optuna's value for a round is its trial-seconds, what it cost.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from ...errors import AccelError
from ...extras import import_or_explain
from ..history import fingerprint, machine_said
from ..records import Trial
from ..runner import SkipRule, TrialResults
from ..script import ScriptLaunch
from ..trial_process import Launch, TrialSettings

NEEDS = "accel tune --objective time (its learning-knob search runs on an Optuna study)"
NEEDS_DASHBOARD = "accel tune --dashboard (optuna-dashboard serves the study)"
HEARTBEAT_S, GRACE_S = 5, 30  # a worker's trial silent this long is taken as dead, and its round run again
POLL_S = 0.2  # how often a worker waiting for a round, or for other workers' rounds, looks at the study: a
# stage of 3-second trials on two workers lost a second at its start and end to 1 s (0.63x of one worker)
RACE_S = 1.0  # how long a worker that lost the race to create a new storage's tables waits before it opens it
DONE = "done"  # the search study's user attribute: set when its coordinator ends, so its workers end too


@dataclass
class StudySpec:
    """Where tune's study lives and who runs its rounds."""

    storage: str  # an Optuna storage URL: sqlite:///PATH (one machine, or a shared file system), postgresql://...
    name: str  # the search's study; each learning stage is the study NAME/STAGE-DIGEST
    helpers: list = field(default_factory=list)  # local worker processes (`--workers N`): while any runs, they work
    heartbeat_s: int = HEARTBEAT_S
    grace_s: int = GRACE_S
    store: Any = field(default=None, repr=False, compare=False)  # the storage, once opened (`storage`)

    def works_here(self) -> bool:
        """Whether this process runs rounds itself: when it started no worker, or all it started have ended."""
        return not any(p.poll() is None for p in self.helpers)


def default_storage(work: Path) -> str:
    """The study beside tune's output: one machine needs no server."""
    return f"sqlite:///{(Path(work) / 'study.db').resolve()}"


def default_name(argv: list[str]) -> str:
    """A study name from the command (less the options saying where and by whom it runs), so the same command
    again continues the same study."""
    where = {"--storage", "--study", "--workers", "--join", "--work", "--out"}
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in where:
            skip = True
        elif arg.split("=")[0] not in where:
            kept.append(arg)
    return "tune-" + hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:10]


def _optuna():
    optuna = import_or_explain("optuna", NEEDS)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # accel's own progress says what each trial did
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def storage(spec: StudySpec):
    """The spec's RDB storage, opened once (each opening checks its schema): with heartbeats, so that a trial of a
    dead worker becomes FAIL and is retried (Optuna's callback)."""
    if spec.store is None:
        spec.store = _opened(spec)
    return spec.store


def _opened(spec: StudySpec):
    optuna = _optuna()
    import sqlalchemy.exc  # optuna's own dependency

    kwargs = {"connect_args": {"timeout": 60}} if spec.storage.startswith("sqlite") else {}  # workers share a file
    if spec.storage.startswith("sqlite:///"):
        Path(spec.storage[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    retry = optuna.storages.RetryFailedTrialCallback(max_retry=None)

    def failed(study, trial) -> None:
        said = f"round {trial.params.get('round')} (trial #{trial.number}) lost its worker: marked FAIL, run again"
        print(f"{study.study_name}: {said}", file=sys.stderr)
        retry(study, trial)

    for attempt in range(3):
        try:
            return optuna.storages.RDBStorage(
                spec.storage,
                engine_kwargs=kwargs,
                heartbeat_interval=spec.heartbeat_s,
                grace_period=spec.grace_s,
                failed_trial_callback=failed,
            )
        except sqlalchemy.exc.SQLAlchemyError:  # workers started together race to create a new database's tables
            if attempt == 2:
                raise
            time.sleep(RACE_S)


def search_study(spec: StudySpec, store, done: bool | None = None):
    """The search's own study: it names the stages' studies and says when its coordinator has ended."""
    study = _optuna().create_study(study_name=spec.name, storage=store, load_if_exists=True)
    if done is not None:
        study.set_user_attr(DONE, done)
    return study


@dataclass
class Stage:
    """One learning stage's study: its rounds of (trial, variant, input) jobs, where they write, how they run."""

    study: Any  # optuna.Study
    rounds: list[list[tuple[int, str, Path | Launch]]]
    out: Path
    settings: TrialSettings
    taken: int | None = None  # the round another process took from this one as lost while it ran it

    @classmethod
    def publish(cls, spec: StudySpec, store, jobs, out: Path, settings: TrialSettings) -> Stage:
        """The stage's study, created with its jobs, or the one an earlier run of the same stage left."""
        rounds: dict[int, list] = {}
        for job in jobs:  # interleaved: trial t of every variant, then t + 1
            rounds.setdefault(job[0], []).append(_job_data(job))
        data = {"rounds": list(rounds.values()), "out": str(Path(out).resolve()), "settings": asdict(settings)}
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]
        name = f"{spec.name}/{Path(out).name}-{digest}"
        study = _optuna().create_study(
            study_name=name, storage=store, sampler=_sampler(len(rounds)), direction="minimize", load_if_exists=True
        )
        if "rounds" not in study.user_attrs:
            for key, value in data.items():
                study.set_user_attr(key, value)
        return cls.of(study)

    @classmethod
    def load(cls, store, name: str) -> Stage:
        optuna = _optuna()
        rounds = optuna.load_study(study_name=name, storage=store).user_attrs["rounds"]
        return cls.of(optuna.load_study(study_name=name, storage=store, sampler=_sampler(len(rounds))))

    @classmethod
    def of(cls, study) -> Stage:
        attrs = study.user_attrs
        rounds = [[_job(job) for job in jobs] for jobs in attrs["rounds"]]
        return cls(study, rounds, Path(attrs["out"]), TrialSettings(**_settings(attrs["settings"])))

    def trials(self, *states) -> list:
        return self.study.get_trials(deepcopy=False, states=states or None)

    def complete(self) -> dict[int, Any]:
        """Round -> its first COMPLETE trial."""
        done: dict[int, Any] = {}
        for trial in self.trials(_optuna().trial.TrialState.COMPLETE):
            done.setdefault(trial.params["round"], trial)
        return done

    def has_work(self) -> bool:
        """A round the grid has not started, or one waiting to run again (its worker was lost)."""
        every = self.trials()
        started = {t.system_attrs["grid_id"] for t in every if "grid_id" in t.system_attrs}
        return len(started) < len(self.rounds) or any(t.state.name == "WAITING" for t in every)

    def run_round(self, run_trials, console: Console, skip: SkipRule | None = None) -> None:
        """Run the next round here, under Optuna's heartbeat (Study.optimize), with its trials recorded. A round
        whose heartbeat came later than the grace period (a machine too busy to send it) was marked FAIL by another
        process and queued again: this one's trials are dropped, and the worker goes on."""
        self.taken = None
        try:
            self.study.optimize(lambda trial: self._round(trial, run_trials, console, skip), n_trials=1, catch=())
        except Exception:  # Optuna's own telling of the finished trial fails after ours: the flag says why
            if self.taken is None:
                raise
            said = f"round {self.taken}'s heartbeat came later than the grace period: it was marked FAIL, run again"
            console.print(f"{self.study.study_name}: {said}", soft_wrap=True)

    def _round(self, trial, run_trials, console: Console, skip: SkipRule | None) -> float:
        optuna = _optuna()
        r = trial.suggest_int("round", 0, len(self.rounds) - 1)  # the grid's next, or a retry's own
        running = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING
        if any(t.number != trial.number and t.params.get("round") == r for t in self.trials(*running)):
            raise optuna.TrialPruned(f"round {r} is another worker's")  # two workers asked at once: not run twice
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")  # who runs it, while it runs
        earlier = [t for done in self.complete().values() for t in _trials(done)]
        rule = (lambda variant, done: skip(variant, [*earlier, *done])) if skip else None
        try:
            results = run_trials(self.rounds[r], self.out, self.settings, console, skip=rule)
            if getattr(results, "interrupted", False):
                raise KeyboardInterrupt
        except KeyboardInterrupt:  # stopped here, not lost: the round waits for the next worker or rerun
            self.study.enqueue_trial({"round": r})
            raise
        try:
            trial.set_user_attr("trials", [t.to_data() for t in results])
            trial.set_user_attr("readings", {t.variant: _reading(t) for t in results})  # what a dashboard shows
            trial.set_user_attr("machine", next((_machine(t) for t in results if t.env), None))
        except optuna.exceptions.UpdateFinishedTrialError:
            self.taken = r  # another process marked the round FAIL and queued it again
            raise
        if getattr(results, "stopped", None):
            trial.set_user_attr("stopped", results.stopped)
        return sum(t.wall_s or 0.0 for t in results)

    def results(self, console: Console) -> TrialResults:
        """Every round's trials, in round order; a study whose rounds ran on different machines says so."""
        done = self.complete()
        found = TrialResults(t for r in sorted(done) for t in _trials(done[r]))
        found.stopped = next((t.user_attrs["stopped"] for t in done.values() if "stopped" in t.user_attrs), None)
        machines = sorted({t.user_attrs["machine"] for t in done.values() if t.user_attrs.get("machine")})
        if len(machines) > 1:
            console.print(
                f"{self.study.study_name}: rounds ran on {len(machines)} machines ({'; '.join(machines)}): each "
                "candidate is compared only with the reference of its own round, measured beside it",
                soft_wrap=True,
            )
        return found


@dataclass
class StudyRunner:
    """A TrialRunner for the learning stages: the stage's jobs become its study's rounds, run here (by `inner`)
    or by the study's other workers, and every round's trials come back once all are COMPLETE."""

    spec: StudySpec
    inner: Any  # this process's runner (accel.bench.runner.run_trials, or a simulation)

    def __call__(self, jobs, out, settings, console=None, skip=None) -> TrialResults:
        console = console or Console(stderr=True)
        stage = Stage.publish(self.spec, storage(self.spec), jobs, Path(out), settings)
        done = len(stage.complete())
        if done:
            said = f"{done} of {len(stage.rounds)} rounds already COMPLETE, continuing"
            console.print(f"{stage.study.study_name}: {said}", soft_wrap=True)  # one line, whatever the width
        while len(stage.complete()) < len(stage.rounds):
            if self.spec.works_here() and stage.has_work():
                stage.run_round(self.inner, console, skip)
                continue
            _optuna().storages.fail_stale_trials(stage.study)  # a silent worker's round: FAIL, then enqueued again
            time.sleep(POLL_S)
        return stage.results(console)


def join(spec: StudySpec, run_trials, console: Console | None = None) -> int:
    """A worker: run the search's rounds, stage after stage, until its coordinator ends it; the rounds it ran. A
    worker of a coordinator that was killed waits for the same command to continue the search."""
    console = console or Console(stderr=True)
    store = storage(spec)
    ran = 0
    while True:
        stage = next((s for s in _stages(spec, store) if s.has_work()), None)
        if stage is not None:
            stage.run_round(run_trials, console)
            ran += 1
            continue
        if search_study(spec, store).user_attrs.get(DONE):
            return ran
        for stage in _stages(spec, store):
            _optuna().storages.fail_stale_trials(stage.study)
        time.sleep(POLL_S)


def only_search(url: str) -> str:
    """The one search a storage holds (`--join URL` without --study)."""
    names = [s.study_name for s in _optuna().get_all_study_summaries(url) if "/" not in s.study_name]
    if len(names) != 1:
        held = ", ".join(names) or "none"
        raise AccelError(f"--join {url}: name the search with --study NAME; the storage holds {held}.")
    return names[0]


def _stages(spec: StudySpec, store) -> list[Stage]:
    names = _optuna().get_all_study_names(store)
    return [Stage.load(store, name) for name in names if name.startswith(spec.name + "/")]


def _sampler(rounds: int):
    # each round once, in the sampler's own seeded order: a round holds every candidate, so its place changes nothing
    return _optuna().samplers.GridSampler({"round": list(range(rounds))})


def _trials(trial) -> list[Trial]:
    return [Trial.model_validate(data) for data in trial.user_attrs.get("trials", [])]


def _reading(trial: Trial) -> str:
    """A round's trial in a few words: `7.5 s to the target`, `pruned: ...`, `val_loss 2.41 at its last
    evaluation`, `failed`."""
    if trial.error:
        return "failed"
    if trial.pruned:
        return f"pruned: {trial.pruned}"
    if trial.time_to_target_s is not None:
        return f"{trial.time_to_target_s:.1f} s to the target"
    if trial.target_evals:  # its curve (the first stage's, before a target), or short of the target
        return f"{trial.val_metric_name or 'its metric'} {trial.target_evals[-1]['value']:.4g} at its last evaluation"
    return f"{trial.samples_per_s:,.0f} samples/s" if trial.samples_per_s else "no reading"


def _machine(trial: Trial) -> str:
    return machine_said(fingerprint(trial.env))


def _job_data(job: tuple[int, str, Path | Launch]) -> list:
    t, name, given = job
    return [t, name, str(Path(given).resolve()) if isinstance(given, Path) else asdict(given)]


def _job(data: list) -> tuple[int, str, Path | Launch]:
    t, name, given = data
    if isinstance(given, str):
        return t, name, Path(given)
    fields = {k: tuple(tuple(v) if isinstance(v, list) else v for v in vs) for k, vs in given.items()}
    return t, name, ScriptLaunch(**fields)  # JSON's lists back to the launch's tuples (env: name-value pairs)


def _settings(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "metric_patterns": tuple(data["metric_patterns"])}
