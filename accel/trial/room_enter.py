"""Enter a trial's private view of the file system, then run the trial's command in it (Linux).

Run as a file, not a module (`python -I -S room_enter.py STAGE [EXIT ...] -- COMMAND ...`): it imports nothing but
the standard library, so it starts in milliseconds and never runs the trial's sitecustomize. In a new user and mount
namespace it lays an overlay over every writable mount the command can reach (the upper layers in a tmpfs mounted
on STAGE, gone with the namespace), binds the system's own trees (/proc, /sys, /dev with the GPU's device files and
/dev/shm, /run, pseudo and read-only mounts) as they are, binds each EXIT (the bench's own folders: the trial's
record, the compile caches) through to the real files, moves its root there and drops back to the caller's user,
without the capabilities that could undo the mounts. Why: accel/bench/isolation.py."""

import ctypes
import os
import shutil
import signal
import sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, MNT_DETACH = 1, 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}  # its syscall number
PSEUDO = {
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "mqueue", "debugfs", "tracefs", "securityfs",
    "pstore", "bpf", "configfs", "fusectl", "hugetlbfs", "autofs", "binfmt_misc", "efivarfs", "nsfs", "rpc_pipefs",
    "selinuxfs",
}  # fmt: skip
SYSTEM = ("/proc", "/sys", "/dev", "/run")
COPIED = 16 << 20  # bytes: a file beside mounts up to this size is copied into the view
FAILED = 125  # the exit code of a room that could not be made (the command never ran)

_libc = ctypes.CDLL(None, use_errno=True)


class RoomError(Exception):
    pass


def _call(what: str, result: int) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise RoomError(f"{what}: {os.strerror(errno)}")


def _unshare(flags: int) -> None:
    _call("unshare", _libc.unshare(flags))


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    result = _libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data))
    _call(f"mount {fstype or 'bind'} {source} on {target}", result)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _map_ids(inner_uid: int, outer_uid: int, inner_gid: int, outer_gid: int) -> None:
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{inner_uid} {outer_uid} 1")
    _write("/proc/self/gid_map", f"{inner_gid} {outer_gid} 1")


def _unescape(field: str) -> str:
    """A mount point as /proc/self/mountinfo writes it (a space is `\\040`)."""
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="surrogateescape")


def mounts() -> dict[str, tuple[str, bool]]:
    """Each mount point (the last mount at a path): its file system type and whether it is read-only."""
    found: dict[str, tuple[str, bool]] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            fstype = fields[fields.index("-") + 1]
            found[_unescape(fields[4])] = (fstype, "ro" in fields[5].split(","))
    return found


def _lowerdir(path: str) -> str:
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


class View:
    """The trial's view, laid under a tmpfs: a writable folder with no mount below it is one overlay (the kernel
    refuses an overlay whose lower folder holds the mounts a new namespace locks, such as /proc under /), so / and
    any such folder are laid entry by entry."""

    def __init__(self, stage: str, points: dict[str, tuple[str, bool]]) -> None:
        self.stage, self.points, self.layers = stage, points, 0

    def mirror(self, path: str, target: str) -> None:
        fstype, read_only = self.points.get(path, ("", False))
        if path in SYSTEM or fstype in PSEUDO:
            return _mount(path, target, None, MS_BIND | MS_REC)  # as it is, with what is mounted below
        prefix = path.rstrip("/") + "/"
        if any(p.startswith(prefix) for p in self.points):  # a read-only / may hold a writable /home
            for name in os.listdir(path):
                self._entry(prefix + name, os.path.join(target, name))
        elif read_only:
            _mount(path, target, None, MS_BIND)  # nothing to write there: as it is
        else:
            self._overlay(path, target)

    def _entry(self, path: str, target: str) -> None:
        if os.path.islink(path) and path not in self.points:
            os.symlink(os.readlink(path), target)
        elif os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
            if path != self.stage:  # the room's own tmpfs, where a folder beside a mount holds it
                self.mirror(path, target)
        elif path not in self.points and _copied(path, target):
            pass  # a file beside mounts (/etc/passwd beside a container's /etc/hosts): its copy takes the writes
        else:  # a mounted file, as it is; a large one beside mounts, read-only
            open(target, "a").close()
            _mount(path, target, None, MS_BIND)
            if path not in self.points:
                _read_only(path, target)

    def _overlay(self, path: str, target: str) -> None:
        upper, work = (os.path.join(self.stage, f"{kind}{self.layers}") for kind in "uw")
        self.layers += 1
        os.mkdir(upper)
        os.mkdir(work)
        # userxattr: a user namespace may not set trusted.* attributes, without which removing a folder fails
        options = f"lowerdir={_lowerdir(path)},upperdir={upper},workdir={work},userxattr"
        _mount("overlay", target, "overlay", 0, options)


def _copied(path: str, target: str) -> bool:
    """Whether `path` is small and readable enough to be copied into the view (an overlay takes only folders)."""
    try:
        if os.path.getsize(path) > COPIED:
            return False
        shutil.copy2(path, target)
        return True
    except OSError:
        return False


def _read_only(path: str, target: str) -> None:
    """A bind of a plain file made read-only, keeping the flags a namespace may not clear (nosuid, nodev, noexec:
    statvfs's bits are the mount flags' own)."""
    kept = os.statvfs(path).f_flag & (os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC)
    _mount("none", target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept)


def build(stage: str, exits: list[str]) -> str:
    """Lay the view under STAGE/root; its path."""
    _mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the real mounts
    points = mounts()  # before the stage's own tmpfs
    _mount("accel-room", stage, "tmpfs", 0, "mode=0700")
    root = os.path.join(stage, "root")
    os.mkdir(root)
    View(stage, points).mirror("/", root)
    for path in exits:
        _mount(path, root + path, None, MS_BIND)
    return root


def _move_root(root: str) -> None:
    """The view becomes the namespace's root and the real one leaves it (a chroot would keep it reachable, and a
    chrooted process may not make the user namespace that drops the capabilities)."""
    _mount(root, root, None, MS_BIND | MS_REC)  # pivot_root takes a mount point
    os.chdir(root)
    _call("pivot_root", _libc.syscall(PIVOT_ROOT[os.uname().machine], b".", b"."))
    _call("umount the real root", _libc.umount2(b".", MNT_DETACH))
    os.chdir("/")


def enter(stage: str, exits: list[str]) -> None:
    uid, gid, cwd, parent = os.getuid(), os.getgid(), os.getcwd(), os.getppid()
    _unshare(CLONE_NEWUSER | CLONE_NEWNS)
    _map_ids(0, uid, 0, gid)
    _move_root(build(stage, exits))
    os.chdir(cwd)
    _unshare(CLONE_NEWUSER)  # back to the caller's ids, with no power over the mounts above
    _map_ids(uid, 0, gid, 0)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a change of credentials cleared the parent's
    if os.getppid() != parent:
        raise RoomError("the bench ended while the room was made")


def main(argv: list[str]) -> None:
    split = argv.index("--")
    stage, exits, command = argv[1], argv[2:split], argv[split + 1 :]
    try:
        enter(stage, exits)
    except (RoomError, OSError, KeyError) as err:  # KeyError: a machine whose pivot_root is not known here
        print(f"accel: cannot give the trial a private view of the file system: {err}", file=sys.stderr, flush=True)
        sys.exit(FAILED)
    try:
        os.execvp(command[0], command)
    except OSError as err:
        print(f"accel: cannot run {command[0]}: {err}", file=sys.stderr, flush=True)
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv)
