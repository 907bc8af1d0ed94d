"""Revisions of the user's repository as a bench sees them: each resolved to its commit (short hash and subject),
checked out once into a folder of its own, and removed again (docs/bench.md, "Did my change slow training down?").

A commit gets a detached `git worktree` in a temporary folder; `.` (the working tree as it is, uncommitted
changes included) gets a copy of its files, tracked and untracked but not ignored, so the user may go on editing
while the trials run. Neither writes the user's working tree, index, HEAD or branches: a worktree adds only its
own entry under .git/worktrees, which `Checkouts.close()` removes again, also after Ctrl-C.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import AccelError

WORKING_TREE = "."
WORKING_TREE_NAME = "working-tree"  # its variant's name: `.` would make a poor file name and a poor label
GITLINK = "160000"  # the mode git gives a submodule's entry in a tree


@dataclass(frozen=True)
class Revision:
    """A commit (or the working tree) under test: `name` labels its variants, `commit` is the full hash (the
    working tree's HEAD for `.`)."""

    spec: str
    name: str
    commit: str | None
    subject: str
    date: str | None  # the commit's date, ISO 8601: the order of a history
    dirty: bool = False  # the working tree, with changes beyond its HEAD

    @property
    def label(self) -> str:
        """`3f2a1bc "Add a data transform"`; the working tree says what it is built on."""
        if self.spec != WORKING_TREE:
            return f'{self.name} "{self.subject}"'
        base = f'{self.commit[:7]} "{self.subject}"' if self.commit else "no commit yet"
        return f"working tree ({base}{' + uncommitted changes' if self.dirty else ''})"


def git(root: Path, *args: str) -> str:
    """`git -C root ARGS`'s output; its own message as an AccelError when it fails."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise AccelError("comparing revisions needs git, and no `git` is on the PATH.") from None
    if done.returncode != 0:
        raise AccelError(f"`git {' '.join(args)}` failed in {root}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def repo_root(where: Path | None = None) -> Path:
    """The top folder of the git repository holding `where` (the current folder)."""
    where = Path(where or Path.cwd())
    try:
        return Path(git(where, "rev-parse", "--show-toplevel").strip())
    except AccelError:
        raise AccelError(
            f"{where} is not inside a git repository: --rev, --bisect and --history compare commits of the "
            "repository your script lives in; run accel from there."
        ) from None


def resolve(root: Path, spec: str) -> Revision:
    """The revision `spec` names (a hash, branch, tag, `HEAD~2`, or `.`); a clear error when there is none."""
    if spec == WORKING_TREE:
        return _working_tree(root)
    try:
        commit = git(root, "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}").strip()
    except AccelError:
        raise AccelError(
            f"no revision `{spec}` in {root}: give a commit, branch or tag it has (see `git log --oneline`), or `.` "
            "for the working tree as it is."
        ) from None
    _check_no_submodules(root, spec, git(root, "ls-tree", "-r", commit))
    short, subject, date = git(root, "log", "-1", "--format=%h%x00%s%x00%cI", commit).rstrip("\n").split("\0")
    return Revision(spec, short, commit, subject, date)


def _working_tree(root: Path) -> Revision:
    _check_no_submodules(root, WORKING_TREE, git(root, "ls-files", "--stage"))
    try:
        head = git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}").strip()
    except AccelError:  # a repository without a commit yet
        return Revision(WORKING_TREE, WORKING_TREE_NAME, None, "", None, dirty=True)
    subject, date = git(root, "log", "-1", "--format=%s%x00%cI", head).rstrip("\n").split("\0")
    # `status --porcelain` would refresh the index's stat data, a write: diff-index and ls-files only read it
    changed = git(root, "diff-index", "--name-only", "HEAD") or git(root, "ls-files", "--others", "--exclude-standard")
    return Revision(WORKING_TREE, WORKING_TREE_NAME, head, subject, date, dirty=bool(changed.strip()))


def _check_no_submodules(root: Path, spec: str, tree: str) -> None:
    """A worktree leaves submodules empty: the script would run without them, and its figure would mean nothing."""
    found = [line.split("\t", 1)[-1] for line in tree.splitlines() if line.startswith(GITLINK)]
    if found:
        raise AccelError(
            f"revision `{spec}` of {root} has submodules ({', '.join(found[:3])}): accel checks each revision out "
            "into a git worktree, where submodules stay empty, so it cannot compare revisions of this repository."
        )


def resolve_all(root: Path, specs: list[str]) -> list[Revision]:
    revisions = [resolve(root, spec) for spec in specs]
    names = [r.name for r in revisions]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise AccelError(f"--rev names the same commit twice ({', '.join(twice)}): list each revision once.")
    return revisions


def commits_between(root: Path, good: str, bad: str) -> list[Revision]:
    """The first-parent commits after `good` up to `bad`, oldest first: what a bisection searches."""
    first, last = resolve(root, good), resolve(root, bad)
    try:
        git(root, "merge-base", "--is-ancestor", first.commit, last.commit)
    except AccelError:
        raise AccelError(
            f"--bisect {good}..{bad}: {good} is not an ancestor of {bad}; give the older one first."
        ) from None
    hashes = git(root, "rev-list", "--reverse", "--first-parent", "--ancestry-path", f"{first.commit}..{last.commit}")
    if not hashes.split():
        raise AccelError(f"--bisect {good}..{bad}: no commit after {good} up to {bad}; nothing to search.")
    return [first] + [resolve(root, commit) for commit in hashes.split()]


class Checkouts:
    """Each revision checked out once, on first use, into a temporary folder; `close()` removes every one."""

    def __init__(self, root: Path):
        self.root = root
        self.folder = Path(tempfile.mkdtemp(prefix="accel-rev-"))
        self.paths: dict[str, Path] = {}
        self._worktrees: list[Path] = []

    def __enter__(self) -> Checkouts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def path(self, revision: Revision) -> Path:
        """The folder that holds `revision`'s files, checked out now if it is not yet."""
        if revision.name not in self.paths:
            target = self.folder / revision.name
            if revision.spec == WORKING_TREE:
                _copy_working_tree(self.root, target)
            else:
                self._worktrees.append(target)  # before the add: one cut short is removed too
                git(self.root, "worktree", "add", "--detach", "--quiet", str(target), revision.commit)
            self.paths[revision.name] = target
        return self.paths[revision.name]

    def close(self) -> None:
        """Remove every checkout; Ctrl-C and SIGTERM wait until that is done (then act as they would have)."""
        signals = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
        try:
            self._remove()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _remove(self) -> None:
        for target in self._worktrees:
            subprocess.run(
                ["git", "-C", str(self.root), "worktree", "remove", "--force", str(target)], capture_output=True
            )
        shutil.rmtree(self.folder, ignore_errors=True)
        if self._worktrees:  # the entry of one whose removal failed, its folder gone now
            subprocess.run(["git", "-C", str(self.root), "worktree", "prune"], capture_output=True, check=False)
        self._worktrees, self.paths = [], {}


def _copy_working_tree(root: Path, target: Path) -> None:
    """The files git would commit with `git add -A`, as they are now, without touching the index."""
    listed = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in dict.fromkeys(n for n in listed.split("\0") if n):
        source = root / name
        if not os.path.lexists(source):  # deleted in the working tree
            continue
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / name, follow_symlinks=False)


def relocated(root: Path, checkout: Path, path: Path) -> Path:
    """`path` inside the user's repository as the same path inside `checkout`; a path git ignores there (an
    interpreter in the repository's .venv, a data folder) or one outside the repository as it is."""
    path = Path(path).absolute()
    for inside in (path, path.resolve()):  # the repository reached through a symbolic link, or not
        try:
            relative = inside.relative_to(root)
        except ValueError:
            continue
        ignored = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", str(relative)], capture_output=True)
        return path if ignored.returncode == 0 else checkout / relative
    return path


def trial_folder(root: Path, checkout: Path) -> Path:
    """The checkout's copy of the current folder: a revision's trials run there, so `train.py` and the modules
    it imports are the revision's."""
    here = Path.cwd()
    try:
        folder = checkout / here.resolve().relative_to(root)
    except ValueError:
        return checkout  # the repository's top, when accel runs from outside it
    folder.mkdir(parents=True, exist_ok=True)  # a folder of ignored or untracked files only
    return folder


def command_in(root: Path, checkout: Path, command: list[str]) -> list[str]:
    """The script's command run from a checkout: an absolute path into the repository points into the checkout;
    relative ones follow the trial's folder, the checkout's copy of the current one."""
    return [str(relocated(root, checkout, Path(t))) if os.path.isabs(t) else t for t in command]
