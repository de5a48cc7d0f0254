"""The sandbox: a fork server (the *zygote*) and the *workers* that run student code.

Processes (see autograder/README.md for the drawing and the threat model): the *grader*
(``python -m autograder grade``) starts *runners*; a runner forks *runner children* (trusted
pytest, one per submission) and one zygote; the zygote forks one worker per submission notebook.

The zygote is forked from a runner right after ``import torch`` and before any hidden test is
imported, so its memory holds no test. Where the system allows (``--sandbox auto`` or
``namespace``) it enters its own network and mount namespaces, builds a read-only root holding
only an allowlist (Python's installation, the packages, the course library, system libraries:
:mod:`.namespaces`) and ``chroot``s into it, zeroes the environment block it inherited, and
becomes a child subreaper (:mod:`.reaping`). Without namespaces ``auto`` refuses: the instructor
must ask for ``--sandbox fallback`` by name, and the report says what it cannot guarantee.

Each worker, before it touches student code: starts its own session, gets private tmpfs ``/tmp``,
``/var/tmp`` and ``/dev/shm`` (namespace mode), sets rlimits (:mod:`.limits`), drops to a uid of
its own with no capability, no new privileges and RLIMIT_NPROC = 1 (the kernel refuses threads
and processes), replaces its environment, silences fds 1 and 2, seals the grader's modules away,
refuses threads, FIFOs and raw process creation, and installs the audit hook (:mod:`.audit`).
Then it serves :mod:`autograder.wire.protocol` requests (:mod:`autograder.sandbox.worker`).
"""

from __future__ import annotations

import gc
import os
import shutil
import signal
import socket
import sys
import time
import traceback
from typing import Any

from autograder.sandbox import audit, limits, namespaces, reaping
from autograder.sandbox.limits import MIN_ADDRESS_SPACE, UID_BLOCK, UID_FIRST, claim_uid_block  # noqa: F401
from autograder.sandbox.namespaces import drop_to_uid, mount, unshare  # noqa: F401
from autograder.wire import protocol

PREIMPORTS = (
    "math", "random", "itertools", "functools", "collections", "dataclasses", "typing",
    "numbers", "string", "re", "copy", "warnings", "enum", "numpy", "torch", "torch.nn",
    "torch.nn.functional", "torch.overrides", "torch.utils._python_dispatch", "torch.optim",
    "torch._dynamo",  # creating an optimizer imports it: ~2 s once here, not in every worker
    "course_lib",
    "course_lib.attention", "course_lib.layers", "course_lib.positional", "course_lib.masking",
    "course_lib.checks", "course_lib.data", "course_lib.gpu", "course_lib.models",
    "course_lib.vision", "autograder.sandbox.worker", "sqlite3", "_posixsubprocess",
    "matplotlib.pyplot",  # the setup cells import it: ~0.5 s once here, not in every worker
)  # fmt: skip
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_GUARANTEED = (
    "fallback sandbox: NOT guaranteed: student code runs as the grader's user (not root: no uid "
    "of its own), so what that user may read or write, native code in the worker (a torch or "
    "numpy routine with no audit event, a file mapping) may read or write too, the grader's "
    "files, results and hidden folders included; the audit hook refuses Python-level access to "
    "the hidden folders and writes outside the work folder only; threads and processes are "
    "refused only inside the interpreter; no network namespace; IPC shared"
)
FALLBACK_AS_ROOT = (
    "fallback sandbox as root: each worker runs as a uid of its own (no capabilities, one task: "
    "the kernel refuses threads and processes); the grader's package, the course folder, the "
    "hidden suites and folders and the results are closed to it (mode o-rwx, set before any "
    "worker starts), only the interpreter and its site-packages stay open; NOT guaranteed: "
    "other files any user may read (system files, other world-readable folders) are readable; "
    "no network namespace (sockets refused by the audit hook); /tmp and IPC shared"
)


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
    """Namespaces and the uid check; returns the containment report. The allowlisted root is
    entered later (:func:`_enter_root`), once the libraries are imported."""
    report: dict[str, Any] = {"net_ns": False, "mount_ns": False, "use_uid": False}
    want = config.get("mode", "auto")
    errors = []
    if want != "fallback":
        try:
            if config.get("simulate_no_namespaces"):  # tests: a host that refuses unshare
                raise OSError(1, "unshare: Operation not permitted (simulated)")
            namespaces.unshare(namespaces.CLONE_NEWNET)
            report["net_ns"] = True
        except OSError as error:
            errors.append(str(error))
        try:
            if config.get("simulate_no_namespaces"):
                raise OSError(1, "unshare: Operation not permitted (simulated)")
            namespaces.unshare(namespaces.CLONE_NEWNS)
            namespaces.mount("none", "/", None, namespaces.MS_REC | namespaces.MS_PRIVATE, None)
            report["mount_ns"] = True
        except OSError as error:
            errors.append(str(error))
        if not (report["net_ns"] and report["mount_ns"]):
            raise OSError(
                f"namespaces are not available ({'; '.join(errors)}); to grade without them "
                "pass --sandbox fallback explicitly "
                f"({FALLBACK_AS_ROOT if os.geteuid() == 0 else NOT_GUARANTEED})"
            )
    report["network"] = (
        "network namespace (no interfaces up)"
        if report["net_ns"]
        else "socket creation blocked by an audit hook (no network namespace)"
    )
    unreachable = None
    if config.get("uid_base") and config.get("drop_uid", True) and os.geteuid() == 0:
        # fallback as root too; there, the worker reads the interpreter's files as its own uid
        needs = [] if report["mount_ns"] else _worker_needs({})  # the scratch comes later
        report["use_uid"] = _can_drop(config["uid_base"], needs)
        if not report["use_uid"] and needs:
            unreachable = ", ".join(needs[:3])
    report["uid"] = (
        f"per-worker uid from {config['uid_base']}, no capabilities, one task"
        if report["use_uid"]
        else f"unchanged ({os.geteuid()})"
    )
    if unreachable:  # e.g. an interpreter under /root (0700): workers keep the grader's uid
        report["uid"] += (
            f": a uid of its own could not read the interpreter's files ({unreachable}), so "
            "workers keep the grader's uid (install Python where every user may read it)"
        )
    report["fallback"] = not report["mount_ns"]
    return report


def _seal_library() -> list[str]:
    """Import every module of the course library, then return its folders, which the worker
    cannot read: student code uses the library as loaded, but cannot read its source and print
    it into its feedback."""
    import importlib
    import pkgutil

    try:
        import course_lib
    except ImportError:
        return []
    folders = [os.path.realpath(p) for p in course_lib.__path__]
    for info in pkgutil.walk_packages(course_lib.__path__, "course_lib."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception:  # an optional dependency missing: that module stays unavailable
            pass
    return folders


def _enter_root(config: dict, report: dict) -> None:
    """Mount namespace mode: chroot into the allowlisted root; fallback: masks nothing, the audit
    hook polices paths."""
    if not report["mount_ns"] and report["use_uid"]:
        closed = namespaces.close_to_others(
            [*config.get("hide", []), *config.get("protect", []), PACKAGE_DIR],
            _worker_needs(config),
        )
        if config.get("scratch"):
            _reachable_by_others(config["scratch"])
            os.chmod(config["scratch"], 0o711)  # workers reach their own folder, list nothing
        report["closed"] = closed
        report["filesystem"] = f"permissions and audit hook ({FALLBACK_AS_ROOT})"
        return
    if not report["mount_ns"]:
        report["filesystem"] = f"audit hook only ({NOT_GUARANTEED})"
        return
    allow = list(config.get("allow") or namespaces.default_allowlist([PACKAGE_DIR]))
    masks = [os.path.realpath(p) for p in [*config.get("hide", []), PACKAGE_DIR]]
    links = namespaces.symlinks_on_the_way()  # e.g. a venv reached through a link
    namespaces.allowlist_root(allow, masks, links)
    report["allowlist"], report["links"] = allow, links
    report["filesystem"] = (
        f"mount namespace, read-only allowlisted root ({len(allow)} paths), private /tmp, "
        "/var/tmp, /dev/shm per worker"
    )


def _reachable_by_others(folder: str) -> None:
    """A worker with a uid of its own (fallback) must traverse every folder above its work
    folder: say so at start, not as a worker that exits for no reason."""
    path = os.path.dirname(os.path.realpath(folder))
    while True:
        if not os.stat(path).st_mode & 0o001:
            raise OSError(
                f"the sandbox's scratch folder {folder} is below {path}, which other users cannot "
                "traverse: the workers' uids could not reach their work folders (use a scratch "
                "folder under /tmp)"
            )
        if path == "/":
            return
        path = os.path.dirname(path)


def _log_failure(config: dict) -> None:
    """A worker that failed before serving: its traceback to the zygote's log, where the
    worker may still open it (before it dropped its uid), else nowhere."""
    try:
        with open(config.get("log", os.devnull), "a") as log:
            traceback.print_exc(file=log)
    except OSError:
        pass


def _worker_needs(config: dict) -> list[str]:
    """What a worker must still reach in fallback mode: the interpreter, its prefixes and the
    site-packages it imports from lazily, and the scratch folder holding its work folder."""
    needs = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    needs.add(os.path.dirname(os.path.realpath(sys.executable)))
    needs.update(p for p in sys.path if p and "-packages" in p)
    if config.get("scratch"):
        needs.add(config["scratch"])
    return sorted(needs)


def _can_drop(uid: int, needs: list[str] = ()) -> bool:
    """Whether a child can become ``uid`` with no capability and still list each of
    ``needs``."""
    pid = os.fork()
    if pid == 0:
        try:
            namespaces.drop_to_uid(uid)
            code = 0 if namespaces.capabilities().get("CapEff", 1) == 0 else 1
            for path in needs:
                if os.path.isdir(path):
                    os.listdir(path)
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _public(report: dict) -> dict:
    keys = ("network", "filesystem", "uid", "net_ns", "mount_ns", "use_uid", "fallback", "closed")
    return {k: v for k, v in report.items() if k in keys}


def _zygote_main(sock: socket.socket, config: dict) -> None:
    os.setsid()
    _close_fds({sock.fileno()})
    _devnull_stdio()
    prepare = config.get("prepare")  # tests only (a callable: never from a runner's JSON)
    if callable(prepare):
        prepare()
    try:
        report = _zygote_setup(config)
    except OSError as error:  # e.g. no namespaces and no --sandbox fallback: the runner says why
        protocol.send(sock, {"ready": False, "error": str(error)})
        return
    for name in config.get("preimport", PREIMPORTS):
        try:
            __import__(name)
        except Exception:
            pass
    if config.get("seal_library", True):
        config["hide"] = [*config.get("hide", []), *_seal_library()]
    audit.refuse_file_mapping()  # no file mapping: the file system is not private in fallback
    import torch

    from autograder.sandbox import detector

    detector.freeze()  # what is forbidden is decided now, before any student byte runs

    try:
        _enter_root(config, report)
    except OSError as error:  # the runner says why
        protocol.send(sock, {"ready": False, "error": f"the sandbox's root: {error}"})
        return
    reaping.become_subreaper()
    os.environ.clear()
    namespaces.scrub_environ_memory()

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
                    _log_failure(config)
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
                    reaping.kill_worker(pid, workers[pid]["uid"])
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and (
                msg.get("pid") in workers if msg.get("pid") is not None else workers
            ):
                _reap(workers, finished, config)
                time.sleep(0.005)
            reaping.kill_strays(set(workers))
            protocol.send(sock, {"killed": True})
        elif op == "ping":
            protocol.send(sock, {"pong": msg.get("token")})
        else:
            protocol.send(sock, {"error": f"unknown op {op!r}"})
    for pid in list(workers):
        reaping.kill_worker(pid, workers[pid]["uid"])
    deadline = time.monotonic() + 2.0
    while workers and time.monotonic() < deadline:
        _reap(workers, finished, config)
        time.sleep(0.005)
    reaping.kill_strays(set())


def _wait_readable(sock: socket.socket, timeout: float) -> bool:
    import select

    readable, _, _ = select.select([sock], [], [], timeout)
    return bool(readable)


def _reap(workers: dict, finished: dict, config: dict) -> None:
    reaped = False
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        info = workers.pop(pid, None)
        if info is None:
            continue  # an orphan re-parented to us (we are a subreaper), now gone
        reaped = True
        if os.WIFSIGNALED(status):
            finished[pid] = {"signal": os.WTERMSIG(status)}
        else:
            finished[pid] = {"exitcode": os.WEXITSTATUS(status)}
        if info.get("uid"):
            reaping.kill_worker(None, info["uid"])  # the pid is reaped: only its uid is safe
        scratch = config.get("scratch")
        if scratch:
            shutil.rmtree(os.path.join(scratch, f"w{pid}"), ignore_errors=True)
        if len(finished) > 4096:
            finished.pop(next(iter(finished)))
    if reaped:
        reaping.kill_strays(set(workers))


# ---------------------------------------------------------------------------------------------
# Worker
# ---------------------------------------------------------------------------------------------

WORKER_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def _worker_main(sock: socket.socket, config: dict, report: dict, uid: int | None) -> None:
    os.setsid()
    _close_fds({sock.fileno()})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    cwd = os.path.join(config["scratch"], f"w{os.getpid()}")
    if report["mount_ns"]:
        # no fallback to a shared /tmp: failing here fails the worker
        namespaces.private_tmp(report.get("allowlist", []), report.get("links", []))
        cwd = "/tmp/submission"
    os.makedirs(cwd, mode=0o700, exist_ok=True)
    limits.apply_worker_limits(config["limits"])
    if uid is not None:
        os.chown(cwd, uid, uid)
        limits.single_task()
        namespaces.drop_to_uid(uid)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update({**WORKER_ENV, "HOME": cwd, "TMPDIR": cwd})
    import tempfile

    tempfile.tempdir = cwd
    sys.dont_write_bytecode = True
    _devnull_stdio()
    import torch

    torch.set_num_threads(1)
    from autograder.sandbox import detector
    from autograder.sandbox.worker import Server

    detector.freeze()  # done in the zygote already; a no-op here
    audit.refuse_builtins()
    audit.refuse_compilers()
    audit.seal_imports()
    hidden = [os.path.realpath(p) for p in config.get("hide", [])]
    private = namespaces.PRIVATE if report["mount_ns"] else ()  # tmpfs of its own: writable
    trust = audit.install_audit_hook(
        cwd, hidden, block_sockets=not report["net_ns"], writable=private,
        protected=detector.PROTECTED,
    )  # fmt: skip
    Server(sock, cwd, trust).serve()
