"""The sandbox: a fork server (the *zygote*) and the worker processes that run student code.

The zygote is forked from a grading runner right after ``import torch`` and before any hidden test
is imported, so its memory holds no test. It detaches into its own network and mount namespaces
where the system allows (``unshare``; hidden folders are covered by empty read-only tmpfs mounts)
and then only forks workers on request, one per submission notebook (again after a crash).

Each worker, before it touches student code:

- starts its own session (``setsid``) and, in namespace mode, its own mount namespace with a
  private ``/tmp``; its working directory holds only the extracted submission;
- sets rlimits: CPU seconds, file size, open files, process count, core size 0, and an address
  space no lower than 4 GiB;
- when the grader runs as root, drops to a per-worker uid (no write access to the course, process
  count enforced) keeping only CAP_DAC_READ_SEARCH so the Python installation stays readable;
- replaces its environment by a minimal one, silences fds 1 and 2 (``print`` is captured, bounded);
- installs an audit hook that refuses: writes outside its directory, reading the hidden folders,
  starting processes, signals, ``ctypes``, and (without a network namespace) creating sockets.

Then it serves :mod:`autograder.protocol` requests (:mod:`autograder.worker`): load the code, call a
function, build an object, read an attribute, run forward and backward. Everything it sends back is
plain data. See :class:`autograder.proxy.Student` for the trusted side.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import os
import resource
import shutil
import signal
import socket
import sys
import time
import traceback
from typing import Any

from . import protocol

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REC, MS_PRIVATE = 1 << 14, 1 << 18
PR_SET_KEEPCAPS, PR_SET_NO_NEW_PRIVS = 8, 38
CAP_DAC_READ_SEARCH = 2
MIN_ADDRESS_SPACE = 4 * 1024**3
PREIMPORTS = (
    "math", "random", "itertools", "functools", "collections", "dataclasses", "typing",
    "numbers", "string", "re", "copy", "warnings", "enum", "numpy", "torch", "torch.nn",
    "torch.nn.functional", "torch.overrides", "torch.utils._python_dispatch", "torch.optim",
    "torch._dynamo",  # creating an optimizer imports it: ~2 s once here, not in every worker
    "course_lib",
    "course_lib.attention", "course_lib.layers", "course_lib.positional", "course_lib.masking",
    "course_lib.checks", "course_lib.data", "course_lib.gpu", "course_lib.models",
    "course_lib.vision", "autograder.worker",
)  # fmt: skip

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
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
    """Become ``uid`` (and gid) keeping only CAP_DAC_READ_SEARCH; no way back to root."""
    _check(_libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "prctl(KEEPCAPS)")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    data[0].effective = data[0].permitted = 1 << CAP_DAC_READ_SEARCH
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def _close_fds(keep: set[int]) -> None:
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _devnull_stdio() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


# ---------------------------------------------------------------------------------------------
# Worker uids: a block per runner, claimed with a lock so concurrent grading runs never share one
# ---------------------------------------------------------------------------------------------

UID_FIRST, UID_BLOCK, UID_BLOCKS = 40000, 64, 300
SLOT_DIR = "/tmp/autograder-uid-slots"


def _uids_in_use() -> set[int]:
    used = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as f:
                    for line in f:
                        if line.startswith("Uid:"):
                            used.update(int(u) for u in line.split()[1:])
                            break
            except OSError:
                continue
    return used


def claim_uid_block() -> tuple[int, int] | None:
    """(first uid, lock fd) of a free block of UID_BLOCK uids: no account, no process, and no
    other grading runner holding it. The lock lasts as long as this process."""
    import fcntl
    import pwd

    try:
        os.makedirs(SLOT_DIR, mode=0o700, exist_ok=True)
    except OSError:
        return None
    used = _uids_in_use()
    for slot in range(UID_BLOCKS):
        first = UID_FIRST + slot * UID_BLOCK
        block = range(first, first + UID_BLOCK)
        if used.intersection(block):
            continue
        fd = os.open(os.path.join(SLOT_DIR, f"{slot}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        accounts = False
        for uid in block:
            try:
                pwd.getpwuid(uid)
                accounts = True
                break
            except KeyError:
                pass
        if accounts:
            os.close(fd)
            continue
        return first, fd
    return None


# ---------------------------------------------------------------------------------------------
# Zygote
# ---------------------------------------------------------------------------------------------


def start_zygote(config: dict) -> tuple[int, socket.socket]:
    """Fork the zygote from the current (clean) process; return its pid and control socket."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            parent.close()
            _zygote_main(child, config)
        except BaseException:
            code = 70
            try:
                with open(config.get("log", os.devnull), "a") as log:
                    traceback.print_exc(file=log)
            except OSError:
                pass
        os._exit(code)
    child.close()
    return pid, parent


def _zygote_setup(config: dict) -> dict:
    """Namespaces, masks and the uid check; returns the containment report."""
    report: dict[str, Any] = {"net_ns": False, "mount_ns": False, "use_uid": False}
    want = config.get("mode", "auto")
    errors = []
    if want != "fallback":
        try:
            unshare(CLONE_NEWNET)
            report["net_ns"] = True
        except OSError as error:
            errors.append(str(error))
        try:
            unshare(CLONE_NEWNS)
            mount("none", "/", None, MS_REC | MS_PRIVATE, None)
            masked = 0
            for path in config.get("hide", []):
                if os.path.isdir(path):
                    flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
                    mount("tmpfs", path, "tmpfs", flags, "size=4k,mode=000")
                    masked += 1
            report["mount_ns"] = True
            report["masked"] = masked
        except OSError as error:
            errors.append(str(error))
        if want == "namespace" and not (report["net_ns"] and report["mount_ns"]):
            raise OSError(f"namespaces are not available: {'; '.join(errors)}")
    why = "; ".join(errors) or "disabled by --sandbox fallback"
    report["network"] = (
        "network namespace (no interfaces up)"
        if report["net_ns"]
        else f"socket creation blocked (no network namespace: {why})"
    )
    report["filesystem"] = (
        f"mount namespace, {report['masked']} hidden folders masked, private /tmp"
        if report["mount_ns"]
        else f"audit hook only (writes outside the work folder, hidden folders; {why})"
    )
    if report["mount_ns"] and config.get("uid_base") and config.get("drop_uid", True):
        report["use_uid"] = os.geteuid() == 0 and _can_drop(config["uid_base"])
    report["uid"] = (
        f"per-worker uid from {config['uid_base']}"
        if report["use_uid"]
        else f"unchanged ({os.geteuid()})"
    )
    return report


def _can_drop(uid: int) -> bool:
    pid = os.fork()
    if pid == 0:
        try:
            drop_to_uid(uid)
            code = 0
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _public(report: dict) -> dict:
    keys = ("network", "filesystem", "uid", "net_ns", "mount_ns", "use_uid")
    return {k: v for k, v in report.items() if k in keys}


def _zygote_main(sock: socket.socket, config: dict) -> None:
    os.setsid()
    _close_fds({sock.fileno()})
    _devnull_stdio()
    report = _zygote_setup(config)
    for name in config.get("preimport", PREIMPORTS):
        try:
            __import__(name)
        except Exception:
            pass
    import torch

    torch.set_num_threads(1)
    gc.freeze()
    workers: dict[int, dict] = {}  # pid -> {"uid", "status"}
    finished: dict[int, dict] = {}
    counter = 0
    protocol.send(sock, {"ready": True, "report": _public(report)})
    while True:
        _reap(workers, finished, config)
        try:
            ready = _wait_readable(sock, 0.2)
        except InterruptedError:
            continue
        if not ready:
            continue
        try:
            msg = protocol.recv(sock)
        except (EOFError, OSError, protocol.ProtocolError):
            break
        op = msg.get("op")
        if op == "spawn":
            counter += 1
            uid = (config.get("uid_base") or 0) + counter % UID_BLOCK
            theirs, ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    sock.close()
                    ours.close()
                    _worker_main(theirs, config, report, uid if report["use_uid"] else None)
                except BaseException:
                    code = 71
                os._exit(code)
            theirs.close()
            workers[pid] = {"uid": uid if report["use_uid"] else None}
            socket.send_fds(sock, [b"F"], [ours.fileno()])
            ours.close()
            protocol.send(sock, {"pid": pid})
        elif op == "status":
            pid = msg["pid"]
            deadline = time.monotonic() + msg.get("wait", 0.0)
            while pid in workers and time.monotonic() < deadline:
                _reap(workers, finished, config)
                time.sleep(0.01)
            protocol.send(sock, finished.get(pid, {"running": pid in workers}))
        elif op == "kill":
            for pid in list(workers) if msg.get("pid") is None else [msg["pid"]]:
                if pid in workers:  # never signal a reaped pid: it may belong to someone else
                    _kill_worker(pid, workers[pid])
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and (
                msg.get("pid") in workers if msg.get("pid") is not None else workers
            ):
                _reap(workers, finished, config)
                time.sleep(0.005)
            protocol.send(sock, {"killed": True})
        elif op == "ping":
            protocol.send(sock, {"pong": msg.get("token")})
        else:
            protocol.send(sock, {"error": f"unknown op {op!r}"})
    for pid in list(workers):
        _kill_worker(pid, workers[pid])
    deadline = time.monotonic() + 2.0
    while workers and time.monotonic() < deadline:
        _reap(workers, finished, config)
        time.sleep(0.005)


def _wait_readable(sock: socket.socket, timeout: float) -> bool:
    import select

    readable, _, _ = select.select([sock], [], [], timeout)
    return bool(readable)


def _kill_worker(pid: int | None, info: dict | None) -> None:
    """Kill a worker that has not been reaped yet (``pid``) and, with a per-worker uid, every
    process running as that uid (whatever the worker started)."""
    for target in (-pid, pid) if pid else ():
        try:
            os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    uid = (info or {}).get("uid")
    if uid:  # also whatever it managed to start: everything that runs as its uid
        helper = os.fork()
        if helper == 0:
            try:
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(helper, 0)


def _reap(workers: dict, finished: dict, config: dict) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        info = workers.pop(pid, None)
        if os.WIFSIGNALED(status):
            finished[pid] = {"signal": os.WTERMSIG(status)}
        else:
            finished[pid] = {"exitcode": os.WEXITSTATUS(status)}
        if info and info.get("uid"):
            _kill_worker(None, info)  # the pid is reaped: only its uid is still safe to target
        scratch = config.get("scratch")
        if scratch:
            shutil.rmtree(os.path.join(scratch, f"w{pid}"), ignore_errors=True)
        if len(finished) > 4096:
            finished.pop(next(iter(finished)))


# ---------------------------------------------------------------------------------------------
# Worker
# ---------------------------------------------------------------------------------------------


def _worker_main(sock: socket.socket, config: dict, report: dict, uid: int | None) -> None:
    os.setsid()
    _close_fds({sock.fileno()})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    cwd = os.path.join(config["scratch"], f"w{os.getpid()}")
    if report["mount_ns"]:
        try:
            unshare(CLONE_NEWNS)
            for private in ("/tmp", "/dev/shm"):
                if os.path.isdir(private):
                    mount("tmpfs", private, "tmpfs", MS_NOSUID | MS_NODEV, "size=256m,mode=1777")
            cwd = "/tmp/submission"
        except OSError:
            pass
    os.makedirs(cwd, mode=0o700, exist_ok=True)
    limits = config["limits"]
    address = max(MIN_ADDRESS_SPACE, int(limits.get("address_space", MIN_ADDRESS_SPACE)))
    cpu = int(limits.get("cpu", 120))
    for which, value in (
        (resource.RLIMIT_AS, address),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_FSIZE, int(limits.get("file_size", 64 * 1024**2))),
        (resource.RLIMIT_NOFILE, 256),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(which, (value, value if which != resource.RLIMIT_CPU else value + 5))
    if uid is not None:
        os.chown(cwd, uid, uid)
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.get("processes", 64),) * 2)
        drop_to_uid(uid)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(
        {
            "PATH": "/usr/bin:/bin",
            "HOME": cwd,
            "TMPDIR": cwd,
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    import tempfile

    tempfile.tempdir = cwd
    sys.dont_write_bytecode = True
    _devnull_stdio()
    import torch

    torch.set_num_threads(1)
    hidden = [os.path.realpath(p) for p in config.get("hide", [])]
    _install_audit_hook(cwd, hidden, block_sockets=not report["net_ns"])
    from .worker import Server

    Server(sock, cwd).serve()


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {
    "os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown", "os.link",
    "os.symlink", "os.truncate", "os.utime", "os.chflags", "os.lchflags", "os.setxattr",
    "os.removexattr", "shutil.rmtree", "shutil.copyfile", "shutil.copytree", "shutil.move",
    "shutil.copymode", "shutil.copystat", "shutil.chown", "shutil.make_archive",
    "shutil.unpack_archive",
}  # fmt: skip
_DENIED_EVENTS = {
    "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
    "os.startfile", "subprocess.Popen", "os.kill", "os.killpg", "pty.spawn", "os.add_dll_directory",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function",
    "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata",
    "ctypes.cdata/buffer",
}  # fmt: skip


def _install_audit_hook(cwd: str, hidden: list[str], *, block_sockets: bool) -> None:
    realpath, fspath, fsdecode = os.path.realpath, os.fspath, os.fsdecode
    join, isabs = os.path.join, os.path.isabs
    root = os.path.realpath(cwd)

    def resolve(path: Any) -> str | None:
        if isinstance(path, int):
            return None
        try:
            text = fsdecode(fspath(path))
        except TypeError:
            return None
        return realpath(text if isabs(text) else join(root, text))

    def inside(path: str) -> bool:
        return path == root or path.startswith(root + "/")

    def is_hidden(path: str) -> bool:
        return any(path == h or path.startswith(h + "/") for h in hidden)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            if isinstance(args[0], int) and args[0] > 2:
                raise PermissionError(errno.EPERM, "opening raw file descriptors is not allowed")
            path = resolve(args[0])
            if path is None:
                return
            mode, flags = args[1] or "", args[2] or 0
            if is_hidden(path):
                raise PermissionError(errno.EACCES, "the grader's files are not readable", path)
            writing = any(c in mode for c in "wax+") or bool(flags & _WRITE_FLAGS)
            if writing and not inside(path) and path != "/dev/null":
                raise PermissionError(errno.EACCES, "writing outside the work folder", path)
        elif event in ("os.listdir", "os.scandir", "glob.glob"):
            path = resolve(args[0] if args and args[0] is not None else ".")
            if path and is_hidden(path):
                raise PermissionError(errno.EACCES, "the grader's files are not readable", path)
        elif event in _PATH_EVENTS:
            for arg in args:
                path = resolve(arg) if isinstance(arg, (str, bytes, os.PathLike)) else None
                if path is not None and not inside(path):
                    raise PermissionError(errno.EACCES, f"{event} outside the work folder", path)
        elif event in _DENIED_EVENTS:
            raise PermissionError(errno.EPERM, f"{event} is not allowed while grading")
        elif block_sockets and event.startswith("socket."):
            raise PermissionError(errno.EPERM, "network access is not allowed while grading")

    sys.addaudithook(hook)
