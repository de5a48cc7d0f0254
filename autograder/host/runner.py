"""A grading runner: one per ``--jobs`` slot, started by :mod:`autograder.host.grader`.

It imports torch, pytest and the course library once, forks its zygote (before any hidden test is
imported), then serves commands read as JSON lines on stdin, answering on its original stdout:

- ``collect``: list the hidden suite's tests and markers (the *manifest*);
- ``grade``: run the suite against one prepared submission, once per *run* (a student name:
  the tools grade one submission under several names, each drawing its own seeded inputs).

Each command runs in a *runner child* forked from this warm process, so a submission costs a fork,
not an interpreter start, and nothing a test leaves behind leaks into the next submission. A child
that exceeds the submission's wall limit is killed; the tests it had finished keep their results.
With several runs, the runner child collects the suite once and forks a *run child* per run from
that state; each run child starts its own worker, so every run gives exactly what grading under
that name alone gives (a worker that served one name holds whatever the student's code left in it).
A runner child runs under an address-space limit (``trusted_memory``, above what the runner already
maps): a test that hits it fails with that reason, the others are unaffected.

The hidden suite is never run from where the instructor keeps it: on first use the runner reads
it into memory and writes a private, read-only copy (in its own 0700 folder); before each command
the copy is checked against the snapshot and rewritten if anything changed it. The runner's
scratch folder is removed when it stops.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import json
import os
import resource
import shutil
import stat
import sys
import tempfile
import time
import traceback
import uuid
from typing import Any

from autograder.host.proxy import ZygoteClient
from autograder.sandbox import zygote
from autograder.wire import protocol
from autograder.wire.forbid import is_module_spec

GRACE = 15.0
TRUSTED_MEMORY = 6 * 1024**3  # address space a runner child may add to the runner's
PR_SET_PDEATHSIG = 1


class SuiteCopies:
    """Private, read-only copies of hidden suites, verified against an in-memory snapshot."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="ag-suites-")
        self.snapshots: dict[str, dict[str, bytes]] = {}
        self.copies: dict[str, str] = {}

    def get(self, suite: str) -> str:
        if suite not in self.snapshots:
            files = {}
            for folder, dirs, names in os.walk(suite):
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                for name in names:
                    path = os.path.join(folder, name)
                    if os.path.isfile(path) and not os.path.islink(path):
                        with open(path, "rb") as f:
                            files[os.path.relpath(path, suite)] = f.read()
            self.snapshots[suite] = files
            self.copies[suite] = os.path.join(
                self.root, f"{len(self.copies)}", os.path.basename(suite.rstrip("/"))
            )
        copy = self.copies[suite]
        if not self._intact(suite, copy):
            self._write(suite, copy)
        return copy

    def _intact(self, suite: str, copy: str) -> bool:
        expected = self.snapshots[suite]
        found = set()
        for folder, dirs, names in os.walk(copy):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in names:
                found.add(os.path.relpath(os.path.join(folder, name), copy))
        if found != set(expected):
            return False
        for rel, data in expected.items():
            try:
                with open(os.path.join(copy, rel), "rb") as f:
                    if hashlib.sha256(f.read()).digest() != hashlib.sha256(data).digest():
                        return False
            except OSError:
                return False
        return True

    def _write(self, suite: str, copy: str) -> None:
        if os.path.exists(copy):
            for folder, _dirs, _ in os.walk(copy):
                os.chmod(folder, 0o700)
            shutil.rmtree(copy)
        for rel, data in self.snapshots[suite].items():
            path = os.path.join(copy, rel)
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
            os.chmod(path, stat.S_IRUSR)
        for folder, _, _ in os.walk(copy):
            os.chmod(folder, 0o500)

    def close(self) -> None:
        for folder, _, _ in os.walk(self.root):
            try:
                os.chmod(folder, 0o700)
            except OSError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


def _limit_memory(extra: int) -> None:
    """RLIMIT_AS for a runner child: what the runner maps now plus ``extra`` bytes."""
    try:
        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        return
    limit = size + extra
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def supervise(pid: int, limit: float) -> tuple[int, bool]:
    """Wait for the child ``pid``, killing it after ``limit`` seconds: (wait status, timed out)."""
    deadline = time.monotonic() + limit
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, False
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            return os.waitpid(pid, 0)[1], True
        time.sleep(0.01)


def exit_code(status: int) -> int:
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)


def _die_with_parent() -> None:
    """A run child dies with its runner child (killed for exceeding the command's limit)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Runner:
    def __init__(self, init: dict):
        self.init = init
        self.zygote_pid = 0
        self.zygote: ZygoteClient | None = None
        self.report: dict = {}
        self.suites = SuiteCopies()
        hide = init["sandbox"].setdefault("hide", [])
        hide.append(self.suites.root)  # fallback mode: the audit hook hides the copies too

    def start_zygote(self) -> None:
        pid, sock = zygote.start_zygote(self.init["sandbox"])
        sock.settimeout(120)
        try:
            ready = protocol.recv(sock)
        except EOFError:
            ready = {"ready": False, "error": "the sandbox's zygote exited while starting"}
        if not ready.get("ready"):
            sock.close()
            os.waitpid(pid, 0)
            raise RuntimeError(ready.get("error", "the sandbox did not start"))
        sock.settimeout(None)
        self.zygote_pid, self.zygote = pid, ZygoteClient(sock)
        self.report = ready["report"]

    def stop_zygote(self) -> None:
        """Close the control socket (the zygote then kills its workers and exits) and reap it."""
        try:
            self.zygote.sock.close()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if os.waitpid(self.zygote_pid, os.WNOHANG)[0]:
                    return
                time.sleep(0.01)
            os.kill(self.zygote_pid, 9)
            os.waitpid(self.zygote_pid, 0)
        except OSError:
            pass

    def reset_zygote(self) -> None:
        """After a child was killed mid-request: resynchronise, or fork a fresh zygote."""
        try:
            self.zygote.sock.settimeout(5)
            self.zygote.kill(None)
            self.zygote.ping(uuid.uuid4().hex)
            self.zygote.sock.settimeout(None)
            return
        except Exception:
            pass
        try:
            self.zygote.sock.close()
            os.kill(self.zygote_pid, 9)
            os.waitpid(self.zygote_pid, 0)
        except OSError:
            pass
        self.start_zygote()

    def pytest_args(self, suite: str) -> list[str]:
        return [
            suite,
            "-c",
            self.init["ini"],
            "--rootdir",
            suite,
            "--confcutdir",
            suite,
            "-p",
            "no:cacheprovider",
            "-p",
            "no:stepwise",
            "-p",
            "no:unraisableexception",  # its gc.collect() calls cost ~0.5 s with torch loaded
            "-p",
            "no:threadexception",
            "-q",
            "--assert=plain",
            "--tb=short",
            "-o",
            "python_files=test_*.py",
        ]

    def run_child(self, context: dict, wall: float, limit: float | None = None) -> dict:
        """Run pytest in a runner child; ``wall`` is the submission's limit (its deadline), the
        child is killed ``GRACE`` seconds after ``limit`` (default ``wall``)."""
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                import pytest

                from autograder.host import plugin

                plugin.CONTEXT.clear()
                plugin.CONTEXT.update(context)
                plugin.CONTEXT["zygote"] = self.zygote
                plugin.CONTEXT["deadline"] = time.monotonic() + wall
                plugin.CONTEXT["each_run"] = lambda runs, body: self.each_run(runs, body, wall)
                limits = self.init["sandbox"].get("limits", {})
                _limit_memory(int(limits.get("trusted_memory", TRUSTED_MEMORY)))
                pytest.main(self.pytest_args(context["suite"]), plugins=[plugin])
            except BaseException:
                traceback.print_exc()
                code = 70
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        status, timed_out = supervise(pid, (wall if limit is None else limit) + GRACE)
        if timed_out or exit_code(status) != 0:
            self.reset_zygote()
        else:
            self.zygote.kill(None)  # leftovers, if any
        return {"exit": exit_code(status), "timed_out": timed_out}

    def each_run(self, runs: list[dict], body: Any, wall: float) -> None:
        """In a runner child whose suite is collected: ``body(run)`` in a run child forked for
        each run, under the submission's wall limit; each run's reply goes to its
        ``reply_path``. After a run child that was killed or failed, the zygote's channel is
        resynchronised; if it cannot be, the remaining runs are not graded (the runner then
        resets the zygote)."""
        from autograder.host import plugin

        for i, run in enumerate(runs):
            start = time.monotonic()
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    _die_with_parent()
                    plugin.CONTEXT["deadline"] = time.monotonic() + wall
                    body(run)
                except BaseException:
                    traceback.print_exc()
                    code = 70
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            status, timed_out = supervise(pid, wall + GRACE)
            reply = {"exit": exit_code(status), "timed_out": timed_out}
            reply["seconds"] = round(time.monotonic() - start, 3)
            try:
                if timed_out or exit_code(status) != 0:
                    self.zygote.sock.settimeout(5)
                    self.zygote.kill(None)
                    self.zygote.ping(uuid.uuid4().hex)
                    self.zygote.sock.settimeout(None)
                else:
                    self.zygote.kill(None)  # leftovers, if any
            except Exception as error:
                for rest in runs[i + 1 :]:
                    _write_json(rest["reply_path"], {"error": "the sandbox stopped responding"})
                raise RuntimeError("the zygote's channel could not be resynchronised") from error
            finally:
                _write_json(run["reply_path"], reply)

    def warm(self, specs: list[str]) -> None:
        """Resolve the suite's forbidden specs here, in the runner, once: the runner children it
        forks inherit the imported modules and the answers (``is_module_spec`` is cached). A
        child resolving ``sklearn.datasets`` itself imported scikit-learn and SciPy for every
        submission, a third of a grading's time."""
        for spec in specs:
            if isinstance(spec, str) and not spec.startswith("aten::"):
                is_module_spec(spec)

    def handle(self, cmd: dict) -> dict:
        op = cmd["op"]
        if op == "collect":
            suite = self.suites.get(cmd["suite"])
            context = {"mode": "collect", "suite": suite, "manifest_path": cmd["manifest"]}
            return self.run_child(context, cmd.get("wall", 300.0))
        if op == "grade":
            self.warm(cmd.get("forbid", []))
            with open(cmd["task"], encoding="utf-8") as f:
                task = json.load(f)
            context = {"mode": "grade", **task, **cmd}
            if context.get("suite"):
                context["suite"] = self.suites.get(context["suite"])
            runs = cmd["runs"]
            if len(runs) == 1:  # graded in the runner child itself
                context.update(runs[0])
            limit = cmd["wall"] if len(runs) == 1 else len(runs) * (cmd["wall"] + GRACE)
            return self.run_child(context, cmd["wall"], limit)
        return {"error": f"unknown command {op!r}"}


def _write_json(path: str, data: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def _preimport() -> None:
    for name in zygote.PREIMPORTS:
        try:
            __import__(name)
        except Exception:
            pass


def main() -> int:
    answer = os.fdopen(os.dup(1), "w", buffering=1)
    init = json.loads(sys.stdin.readline())
    log = os.open(init["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.dont_write_bytecode = True
    # torch's compiler caches go to the run folder (removed with it), not to /tmp for good
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.getcwd(), "torchinductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(os.getcwd(), "triton"))
    _preimport()
    import torch

    torch.set_num_threads(1)
    if init["sandbox"].get("mode", "auto") == "auto" and os.environ.get("AUTOGRADER_SANDBOX") in (
        "fallback",
        "namespace",
    ):  # the operator's choice by name, also for callers that build Options themselves
        init["sandbox"]["mode"] = os.environ["AUTOGRADER_SANDBOX"]
    if os.geteuid() == 0:  # namespaces or not: a root grader's workers get uids of their own
        claimed = zygote.claim_uid_block()  # held (locked) until this runner exits
        init["sandbox"]["uid_base"] = claimed[0] if claimed else None
    runner = Runner(init)
    try:
        runner.start_zygote()
    except Exception as error:
        traceback.print_exc()
        answer.write(json.dumps({"ready": False, "error": f"sandbox failed to start: {error}"}))
        answer.write("\n")
        return 1
    from _pytest.config import default_plugins

    for name in default_plugins:  # warm for the children
        try:
            __import__(f"_pytest.{name}")
        except ImportError:
            pass
    from autograder.host import plugin  # noqa: F401

    gc.freeze()  # children never scan (or copy) the warm heap

    answer.write(json.dumps({"ready": True, "report": runner.report}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd: dict[str, Any] = json.loads(line)
        if cmd.get("op") == "stop":
            break
        try:
            reply = runner.handle(cmd)
        except Exception as error:
            traceback.print_exc()
            reply = {"error": f"{type(error).__name__}: {error}"}
        answer.write(json.dumps(reply) + "\n")
    runner.stop_zygote()
    runner.suites.close()
    scratch = init["sandbox"].get("scratch")
    if scratch and os.path.basename(scratch).startswith("ag-scratch"):
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
