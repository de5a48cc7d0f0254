"""No process outlives its worker: the zygote is a child subreaper, so whatever a worker starts
(a ``setsid`` daemon included) is re-parented to the zygote when its parent dies, and killed."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def children(pid: int) -> list[int]:
    """Pids whose parent is ``pid``."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            out.append(int(entry))
    return out


def kill_strays(known: set[int]) -> int:
    """SIGKILL every child of this process that is not a known worker (orphans re-parented here)
    and reap it; repeated while new orphans keep arriving. Returns how many were killed."""
    killed = 0
    for _ in range(50):
        strays = [p for p in children(os.getpid()) if p not in known]
        if not strays:
            break
        for pid in strays:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        for pid in strays:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return killed


def kill_worker(pid: int | None, uid: int | None) -> None:
    """Kill a worker that has not been reaped yet (``pid``, and its process group) and, with a
    per-worker uid, every process running as that uid."""
    for target in (-pid, pid) if pid else ():
        try:
            os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if uid:  # also whatever it managed to start: everything that runs as its uid
        helper = os.fork()
        if helper == 0:
            try:
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(helper, 0)
