"""Kernel-level containment: namespaces, the allowlisted root, and dropping every privilege.

Used by the zygote (``allowlist_root``, once) and by each worker (``private_tmp``,
``drop_privileges``) before any student code exists in the process.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 1 << 14, 1 << 18
PR_SET_KEEPCAPS, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 8, 38, 24
PR_SET_DUMPABLE = 4
LAST_CAP = 63

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None):
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_to_uid(uid: int) -> None:
    """Become ``uid`` (and gid) with no capability at all (effective, permitted, inheritable,
    bounding set), not dumpable (its /proc files stay root's), and no way to gain privileges."""
    for cap in range(LAST_CAP + 1):  # the bounding set: while we still hold CAP_SETPCAP
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            break  # EINVAL past the last capability the kernel knows
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # without KEEPCAPS this clears every capability
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()  # all zero
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(DUMPABLE)")


def close_to_others(paths: list[str], keep: list[str]) -> list[str]:
    """Fallback as root (no mount namespace to hide anything): take every permission away from
    "others" on each of ``paths`` (mode ``o-rwx``, set by the trusted side before any worker
    exists), so that a worker running as a uid of its own can neither read nor write them, by
    any route (native code, a file mapping). A path on the way to one of ``keep`` (the
    interpreter, the site-packages a worker imports from, its scratch folder) keeps only
    ``o+x`` (traverse) and its other entries are closed instead. Symbolic links are left alone
    (their targets are closed where they are listed). Returns the paths closed."""
    keep = [os.path.realpath(k) for k in keep if k]
    closed: list[str] = []

    def inside(path: str, folder: str) -> bool:
        return path == folder or path.startswith(folder.rstrip("/") + "/")

    def close(path: str, listed: bool) -> None:
        try:
            info = os.lstat(path)
        except OSError:
            return
        if stat.S_ISLNK(info.st_mode) or path in keep or path == "/":
            return
        if not listed and any(inside(path, k) for k in keep):
            return
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode) and any(inside(k, path) for k in keep):
            os.chmod(path, (mode & ~0o007) | 0o001)  # traverse only, on the way to a kept path
            for name in sorted(os.listdir(path)):
                close(os.path.join(path, name), False)
            return
        if mode & 0o007:
            os.chmod(path, mode & ~0o007)
        closed.append(path)

    for path in paths:
        close(os.path.realpath(path), True)
    return closed


def available() -> bool:
    """Whether this process may create network and mount namespaces (probed in a child)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            unshare(CLONE_NEWNET | CLONE_NEWNS)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def capabilities() -> dict[str, int]:
    """The current process's capability sets (from /proc/self/status)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Cap"):
                key, value = line.split(":")
                out[key] = int(value.strip(), 16)
    return out


def scrub_environ_memory() -> None:
    """Zero the environment block the process was started with: ``/proc/<pid>/environ`` reads
    it, and ``os.environ.clear()`` leaves it in place. Call before any child is forked."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50, 51)
    except (OSError, IndexError, ValueError):
        return
    if 0 < start < end and end - start < 16 * 1024**2:
        ctypes.memset(start, 0, end - start)


# ---------------------------------------------------------------------------------------------
# The allowlisted root: a read-only tmpfs holding read-only bind mounts of what may be read
# ---------------------------------------------------------------------------------------------

SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/localtime")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
PRIVATE = ("/tmp", "/var/tmp", "/dev/shm")
ANCHOR = "/tmp"  # the new root is built on a tmpfs mounted here (in our namespace only)


def default_allowlist(forbidden: list[str]) -> list[str]:
    """Python's installations, the site-packages on ``sys.path``, the course library, system
    libraries; never a folder that holds one of ``forbidden`` (the grader, the repository)."""
    import importlib.util

    paths = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    paths.update(os.path.realpath(p) for p in sys.path if p and "-packages" in p)
    spec = importlib.util.find_spec("course_lib")
    for location in (spec.submodule_search_locations or []) if spec else []:
        paths.add(os.path.realpath(location))
    bad = [os.path.realpath(p) for p in forbidden]
    out = []
    for path in sorted(paths) + list(SYSTEM_PATHS):
        if not os.path.exists(path):
            continue
        holds = [b for b in bad if b == path or b.startswith(path.rstrip("/") + "/")]
        if holds and not path.endswith("-packages"):
            continue  # the path would expose a forbidden folder (e.g. the repository)
        # an installed grader inside site-packages: allowed, the caller masks the folder
        out.append(path)
    return out


def symlinks_on_the_way() -> list[tuple[str, str]]:
    """``(link, target)`` for each symbolic link on the paths Python already uses (the
    interpreter, its prefixes, ``sys.path``, the course library): a venv at ``/autograder/venv``
    that is a link to the real one. The allowlist holds real paths; these links are recreated in
    the new root so that the paths Python holds keep working."""
    import importlib.util

    spec = importlib.util.find_spec("course_lib")
    places = {sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path}
    places.update((spec.submodule_search_locations or []) if spec else [])
    found: dict[str, str] = {}
    for place in places:
        if not place or not os.path.isabs(place):
            continue
        parts = os.path.normpath(place).split("/")
        for i in range(2, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if os.path.islink(prefix):
                found[prefix] = os.readlink(prefix)
                break
    return sorted(found.items())


def _make_links(root: str, links: list[tuple[str, str]]) -> None:
    for link, target in links:
        if not os.path.lexists(root + link):
            os.makedirs(os.path.dirname(root + link), mode=0o755, exist_ok=True)
            os.symlink(target, root + link)


def allowlist_root(
    allow: list[str], hide: list[str] = (), links: list[tuple[str, str]] = ()
) -> str:
    """Build the new root and ``chroot`` into it (call in a private mount namespace, as root).

    Everything readable afterwards is ``allow`` (read-only), ``/proc``, a few devices and empty
    ``/tmp``, ``/var/tmp``, ``/dev/shm`` folders that each worker covers with its own tmpfs, and
    the symbolic ``links`` (:func:`symlinks_on_the_way`).
    """
    mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    sources = {}
    for path in [*allow, "/proc", *DEVICES]:
        try:
            sources[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
    mount("tmpfs", ANCHOR, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    root = ANCHOR
    for path, fd in sources.items():
        _bind(fd, root + path, readonly=path not in DEVICES)
    for path in PRIVATE:
        os.makedirs(root + path, mode=0o755, exist_ok=True)
    for path in hide:  # a hidden folder inside an allowed one: covered by an empty tmpfs
        if os.path.isdir(root + path):
            flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
            mount("tmpfs", root + path, "tmpfs", flags, "size=4k,mode=000")
    _make_links(root, list(links))
    mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    os.chroot(root)
    os.chdir("/")
    return root


def private_tmp(keep: list[str] = (), links: list[tuple[str, str]] = ()) -> None:
    """In the worker's own mount and IPC namespaces: fresh tmpfs on /tmp, /var/tmp and /dev/shm
    (gone with the namespaces when the worker ends). Allowlisted paths that live inside one of
    them (a clone and its .venv under /tmp) are bound again, read-only, over the fresh tmpfs."""
    unshare(CLONE_NEWNS | CLONE_NEWIPC)  # System V IPC objects die with the worker too
    inside = [k for k in keep if any(k.startswith(p + "/") for p in PRIVATE)]
    held = {}
    for path in inside:  # opened before the tmpfs hides them
        try:
            held[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
    for path in PRIVATE:
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=256m,mode=1777")
    for path, fd in held.items():
        _bind(fd, path, readonly=True)
    _make_links("", [(k, t) for k, t in links if any(k.startswith(p + "/") for p in PRIVATE)])


def _bind(fd: int, target: str, readonly: bool) -> None:
    """Bind the path opened as ``fd`` (``O_PATH``) at ``target``, creating the mount point, with
    its submounts (``MS_REC``: masks inside it come along); then close ``fd``."""
    source = f"/proc/self/fd/{fd}"
    if os.path.isdir(source):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        open(target, "a").close()
    mount(source, target, None, MS_BIND | MS_REC, None)
    if readonly:
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
        mount(None, target, None, flags, None)
    os.close(fd)
