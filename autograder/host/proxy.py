"""The trusted side of the sandbox: what a hidden test holds instead of the student's code.

A hidden test receives the ``student`` fixture, a :class:`Student`. Every attribute is a
remote callable; calling it runs the student's function in the sandboxed worker and returns
plain data (tensors, numbers, strings, nested lists / tuples / dicts). Anything else the student's
code returns (a module, an optimizer) comes back as a :class:`Remote` handle::

    y = student.attention(q, k, v, mask)              # call a function
    mha = student.MultiHeadAttention(embed_dim=16, num_heads=4)  # build an object -> Remote
    mha.load_state_dict(reference.state_dict())       # call a method (plain data in and out)
    y = mha(x)                                        # forward
    g = mha.backward(x, grad_output=dy)               # forward + backward: g.output, g.inputs,
                                                      # g.kwargs, g.params (name -> grad)
    sd = mha.state_dict()                             # read parameters
    heads = mha.get("num_heads")                      # read an attribute
    student.has("causal_mask"), student.get("EPS")    # module-level names
    y = student.mask_tokens.unmodified(ids, p=0.15)  # AssertionError (InputModified) naming
                                                      # each argument the call changed in place
    r = student.merge_pair.tracked(ids, pair, 99)     # r.value, r.modified == ["ids"] or []
    enc = student.build("torch.nn.GRU", 4, 8, state_dict=sd)  # a library object in the worker

Failures surface as exceptions whose messages are meant for the student: :class:`StudentError`
(their code raised), :class:`MissingDefinition`, :class:`CallTimeout`, :class:`WorkerDied` and
:class:`ForbiddenCall`. The last three also fail the test if the test catches them.
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from autograder.wire import protocol


class GradingError(Exception):
    """Base class: the message is safe to show to the student."""


class StudentError(GradingError):
    """The student's code raised an exception inside the worker."""

    def __init__(self, kind: str, message: str, trace: str = "", where: str = ""):
        self.kind, self.message, self.trace = kind, message, trace
        text = f"your code raised {kind}: {message}" if not where else f"{where}: {kind}: {message}"
        if trace:
            text += "\n" + trace
        super().__init__(text)


class MissingDefinition(StudentError):
    """The notebook does not define the name the test asked for."""


class FatalError(GradingError):
    """Fails the test even if the test catches it (recorded by the plugin)."""


class ForbiddenCall(FatalError):
    pass


class WorkerDied(FatalError):
    pass


class CallTimeout(WorkerDied):
    pass


class Tampering(FatalError):
    """Student code reached for the grader or the interpreter's internals (refused, and reported
    by the worker's audit hook), or wrote a reply on the grader's channel itself."""


def _tampering_text(what: str, attempts: list) -> str:
    shown = "; ".join(str(a)[:120] for a in list(attempts)[:3])
    return (
        f"tampering: {what} reached for the grader or the interpreter's internals ({shown}); "
        "this fails the test"
    )


class LoadFailed(FatalError):
    pass


class InputModified(AssertionError):
    """A call made through ``.unmodified(...)`` changed one of its arguments in place (the worker
    compares every tensor, list and dict argument with a copy taken before the call)."""

    def __init__(self, what: str, names: list[str]):
        self.names = list(names)
        shown = ", ".join(repr(n) for n in self.names)
        plural = "s" if len(self.names) > 1 else ""
        super().__init__(
            f"{what} modified its argument{plural} {shown} in place: leave the inputs unchanged "
            "(work on a copy, or build a new tensor / list)"
        )


@dataclass
class Tracked:
    """What ``.tracked(...)`` returns: the call's value and the arguments it changed in place
    (parameter names where the signature gives them, else ``positional argument n``)."""

    value: Any
    modified: list[str]


SIGNAL_REASONS = {
    signal.SIGKILL: "killed (memory or time limit, or the code killed its own process)",
    signal.SIGXCPU: "stopped: CPU time limit exceeded",
    signal.SIGXFSZ: "stopped: file size limit exceeded",
    signal.SIGSEGV: "crashed (segmentation fault)",
    signal.SIGABRT: "aborted",
    signal.SIGBUS: "crashed (bus error)",
}


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
WALL_FACTOR, WALL_SLACK = 3.0, 5.0  # a call may wait (sleep, block) at most 3 x timeout + 5 s


class ZygoteClient:
    """Talks to the fork server over its control socket (one user at a time)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def spawn(self) -> tuple[int, socket.socket]:
        protocol.send(self.sock, {"op": "spawn"})
        _, fds, _, _ = socket.recv_fds(self.sock, 1, 1)
        reply = protocol.recv(self.sock)
        return reply["pid"], socket.socket(fileno=fds[0])

    def status(self, pid: int, wait: float = 0.0) -> dict:
        protocol.send(self.sock, {"op": "status", "pid": pid, "wait": wait})
        return protocol.recv(self.sock)

    def kill(self, pid: int | None = None) -> None:
        protocol.send(self.sock, {"op": "kill", "pid": pid})
        protocol.recv(self.sock)

    def ping(self, token: str) -> bool:
        protocol.send(self.sock, {"op": "ping", "token": token})
        while True:
            reply = protocol.recv(self.sock)
            if reply.get("pong") == token:
                return True


@dataclass
class TestState:
    """What the plugin tracks for the running test (set by the plugin before each test)."""

    nodeid: str = ""
    seed: int | None = None
    forbid: list[str] = field(default_factory=list)
    timeout: float = 10.0
    fatal: list[str] = field(default_factory=list)
    output: list[str] = field(default_factory=list)


SPINNING = 0.1  # CPU seconds per wall second above which a call stopped by the wall limit spun


def wall_message(wall: float, cpu: float, elapsed: float) -> str:
    """Why a call stopped by the wall limit did: the CPU it used tells a loop (in Python or in C,
    on a machine too busy for the CPU limit to come first) from a wait or a sleep."""
    used = f"it used {cpu:.1f} s of CPU time"
    if elapsed > 0 and cpu / elapsed >= SPINNING:
        return (
            f"your code did not finish within {wall:g} s; {used} (spinning: an infinite loop, "
            "or far too slow)"
        )
    return f"your code did not finish within {wall:g} s; {used} (waiting or sleeping?)"


class WorkerSession:
    """One notebook's code in a worker; replaced when the worker dies."""

    def __init__(
        self,
        zygote: ZygoteClient,
        chunks: list,
        *,
        state: TestState,
        deadline: float,
        load_timeout: float = 30.0,
    ):
        self.zygote, self.chunks, self.state = zygote, chunks, state
        self.deadline, self.load_timeout = deadline, load_timeout
        self.pid: int | None = None
        self.sock: socket.socket | None = None
        self.names: dict[str, str] = {}
        self.load_notes: list[str] = []
        self.load_failure: str | None = None
        self.spawns = 0
        self.used = (0.0, 0.0)  # the last call's (CPU seconds, wall seconds)

    # -- lifecycle -------------------------------------------------------------------------

    def _start(self) -> None:
        if self.load_failure:
            raise LoadFailed(self.load_failure)
        self.pid, self.sock = self.zygote.spawn()
        self.spawns += 1
        try:
            reply = self._exchange({"op": "load", "chunks": self.chunks}, self.load_timeout)
        except WorkerDied as error:
            self.load_failure = f"loading your code failed: {error}"
            raise LoadFailed(self.load_failure) from None
        if reply.get("tampering"):
            self.load_failure = _tampering_text("loading your code", reply["tampering"])
            self.close()
            raise LoadFailed(self.load_failure)
        if not reply.get("ok"):
            err = reply.get("error", {})
            self.load_failure = f"loading your code failed: {err.get('type')}: {err.get('message')}"
            self.close()
            raise LoadFailed(self.load_failure)
        self.names = reply.get("names", {})
        if self.spawns == 1:
            self.load_notes = reply.get("notes", [])

    def close(self) -> None:
        if self.pid is not None:
            try:
                self.sock.close()
                self.zygote.kill(self.pid)
            except OSError:
                pass
        self.pid, self.sock = None, None

    def _dead(self, reason: str) -> WorkerDied:
        pid = self.pid
        try:
            self.sock.close()
        except OSError:
            pass
        self.pid, self.sock = None, None
        status = self.zygote.status(pid, wait=1.0) if pid else {}
        if "signal" in status:
            sig = status["signal"]
            why = SIGNAL_REASONS.get(sig, f"killed by signal {sig}")
            return WorkerDied(f"{reason}: the worker running your code was {why}")
        if "exitcode" in status:
            return WorkerDied(
                f"{reason}: your code ended the worker process (exit code "
                f"{status['exitcode']}, e.g. os._exit or a crash)"
            )
        self.zygote.kill(pid)
        return WorkerDied(f"{reason}: the worker running your code stopped responding")

    def _cpu_seconds(self) -> float:
        """CPU time (user + system, all threads) the worker has used so far."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        except (OSError, IndexError, ValueError):
            return 0.0

    def _wait(self, cpu_limit: float, wall_limit: float) -> str | None:
        """Wait for the reply; "cpu" or "wall" once the call used ``cpu_limit`` CPU seconds or
        ``wall_limit`` wall seconds (CPU time keeps the limit fair on a busy machine)."""
        start_cpu, start = self._cpu_seconds(), time.monotonic()
        self.used = (0.0, 0.0)  # (CPU seconds, wall seconds) the call used, for the message
        while True:
            readable, _, _ = select.select([self.sock], [], [], 0.05)
            if readable:
                return None
            cpu = self._cpu_seconds() - start_cpu
            self.used = (max(0.0, cpu), time.monotonic() - start)
            if self.used[1] > wall_limit:
                return "wall"
            if cpu > cpu_limit:
                return "cpu"

    def _exchange(self, msg: dict, timeout: float) -> dict:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise WorkerDied("the submission's total time limit was exceeded")
        wall = min(WALL_FACTOR * timeout + WALL_SLACK, remaining)
        nonce = secrets.token_hex(16)
        msg = {**msg, "nonce": nonce}
        try:
            self.sock.settimeout(60)
            protocol.send(self.sock, msg)
            exceeded = self._wait(timeout, wall)
            if exceeded:
                raise TimeoutError(exceeded)
            reply = protocol.recv(self.sock)
        except TimeoutError as error:
            pid = self.pid
            self.zygote.kill(pid)
            self.sock.close()
            self.pid, self.sock = None, None
            if time.monotonic() >= self.deadline:
                raise WorkerDied("the submission's total time limit was exceeded") from None
            if error.args == ("wall",):
                raise CallTimeout(wall_message(wall, *self.used)) from None
            raise CallTimeout(
                f"your code did not finish within {timeout:g} s of CPU time (an infinite loop, "
                "or far too slow)"
            ) from None
        except (EOFError, ConnectionError, OSError):
            raise self._dead("the call did not complete") from None
        except protocol.ProtocolError as error:
            self.close()
            raise WorkerDied(
                f"the worker sent back something that is not plain data ({error})"
            ) from None
        if not isinstance(reply, dict) or reply.get("nonce") != nonce:
            self.close()
            text = (
                "tampering: a reply on the grader's channel did not come from the grader's worker "
                "(student code wrote to it); the test fails"
            )
            self.state.fatal.append(text)
            raise Tampering(text)
        if reply.get("output"):
            self.state.output.append(reply["output"])
        return reply

    def request(self, msg: dict, *, what: str, modified: list | None = None) -> Any:
        """Send one request; with ``modified`` (a list), the worker also compares the call's
        arguments before and after, and the names of those it changed are appended to it."""
        if modified is not None:
            msg = {**msg, "check_args": True}
        if self.pid is None:
            self._start()
        msg = {**msg, "seed": self.state.seed, "forbid": self.state.forbid}
        reply = self._exchange(msg, self.state.timeout)
        if reply.get("tampering"):
            text = _tampering_text(what, reply["tampering"])
            self.state.fatal.append(text)
            raise Tampering(text)
        violations = reply.get("violations") or []
        if violations:
            text = f"{what} used a forbidden call: " + "; ".join(violations)
            self.state.fatal.append(text)
            raise ForbiddenCall(text)
        if not reply.get("ok"):
            err = reply.get("error", {})
            # only the worker's own lookup says "missing": a NameError raised inside the
            # student's function is that error, with its line
            if err.get("missing") is True and isinstance(msg.get("target"), str):
                raise MissingDefinition(
                    err["type"],
                    f"your notebook does not define {msg['target']!r} (was its cell deleted, "
                    "renamed, or left with a syntax error?)",
                )
            raise StudentError(
                err.get("type", "Error"), err.get("message", ""), err.get("traceback", ""), what
            )
        if modified is not None:
            names = reply.get("modified")
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise WorkerDied(f"{what}: the worker did not report the arguments it changed")
            modified.extend(n[:120] for n in names[:64])
        return self._wrap(reply.get("value"))

    def _wrap(self, value: Any) -> Any:
        if protocol.is_remote_marker(value):
            return Remote(self, value[protocol.REMOTE_KEY], value.get("type", "object"))
        if isinstance(value, dict):
            return {k: self._wrap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._wrap(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self._wrap(v) for v in value)
        return value


def _encode(value: Any) -> Any:
    if isinstance(value, Remote):
        return {protocol.REMOTE_KEY: value._handle}
    if isinstance(value, (RemoteFunction, RemoteMethod)):
        raise TypeError("pass remote objects, not remote functions, as arguments")
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_encode(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return protocol.to_plain(value, _refuse)


def _refuse(obj: Any) -> Any:
    raise TypeError(f"cannot send {type(obj).__name__} to the student's code: only plain data")


@dataclass
class Gradients:
    """Result of a remote forward + backward."""

    output: Any
    inputs: tuple  # gradient for each positional argument (None where not a float tensor)
    kwargs: dict
    params: dict  # parameter name -> gradient (for modules)


def _gradients(value: dict) -> Gradients:
    return Gradients(value["output"], value["inputs"], value["kwargs"], value["params"])


class _Checked:
    """``.unmodified(...)`` and ``.tracked(...)``: the call, with its arguments compared in the
    worker before and after (for hidden tests of "do not modify the input": the worker gets
    copies of what the test holds, so the test's own objects never change)."""

    def _call_message(self, args: tuple, kwargs: dict) -> tuple[WorkerSession, dict, str]:
        raise NotImplementedError

    def tracked(self, *args: Any, **kwargs: Any) -> Tracked:
        session, msg, what = self._call_message(args, kwargs)
        modified: list[str] = []
        value = session.request(msg, what=what, modified=modified)
        return Tracked(value, modified)

    def unmodified(self, *args: Any, **kwargs: Any) -> Any:
        session, msg, what = self._call_message(args, kwargs)
        modified: list[str] = []
        value = session.request(msg, what=what, modified=modified)
        if modified:
            raise InputModified(what, modified)
        return value


class RemoteFunction(_Checked):
    """A module-level name of the student's notebook, called remotely."""

    def __init__(self, session: WorkerSession, name: str):
        self._session, self._name = session, name

    def _call_message(self, args: tuple, kwargs: dict) -> tuple[WorkerSession, dict, str]:
        msg = {"op": "call", "target": self._name, "args": _encode(args), "kwargs": _encode(kwargs)}
        return self._session, msg, f"{self._name}()"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        session, msg, what = self._call_message(args, kwargs)
        return session.request(msg, what=what)

    def backward(self, *args: Any, grad_output: Any = None, **kwargs: Any) -> Gradients:
        msg = {"op": "backward", "target": self._name, "args": _encode(args)}
        msg.update(kwargs=_encode(kwargs), grad_output=_encode(grad_output))
        return _gradients(self._session.request(msg, what=f"{self._name}() backward"))

    def __repr__(self) -> str:
        return f"<student function {self._name}>"


class RemoteMethod(_Checked):
    def __init__(self, remote: Remote, attr: str):
        self._remote, self._attr = remote, attr

    def _call_message(self, args: tuple, kwargs: dict) -> tuple[WorkerSession, dict, str]:
        r = self._remote
        msg = {"op": "call", "target": r._handle, "attr": self._attr}
        msg.update(args=_encode(args), kwargs=_encode(kwargs))
        return r._session, msg, f"{r._short}.{self._attr}()"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        session, msg, what = self._call_message(args, kwargs)
        return session.request(msg, what=what)

    def backward(self, *args: Any, grad_output: Any = None, **kwargs: Any) -> Gradients:
        r = self._remote
        msg = {"op": "backward", "target": r._handle, "attr": self._attr, "args": _encode(args)}
        msg.update(kwargs=_encode(kwargs), grad_output=_encode(grad_output))
        return _gradients(r._session.request(msg, what=f"{r._short}.{self._attr}() backward"))


class Remote:
    """An object living in the worker (e.g. the student's ``nn.Module`` instance)."""

    def __init__(self, session: WorkerSession, handle: int, type_name: str):
        self._session, self._handle, self.type_name = session, handle, type_name
        self._short = type_name.rsplit(".", 1)[-1]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.request(self._message(args, kwargs), what=f"{self._short}(...)")

    def _message(self, args: tuple, kwargs: dict) -> dict:
        return {
            "op": "call",
            "target": self._handle,
            "args": _encode(args),
            "kwargs": _encode(kwargs),
        }

    def unmodified(self, *args: Any, **kwargs: Any) -> Any:
        """Call the object (``remote(x)``), failing with :class:`InputModified` when the call
        changed an argument in place (``remote.method("unmodified")`` reaches a method of that
        name)."""
        modified: list[str] = []
        what = f"{self._short}(...)"
        value = self._session.request(self._message(args, kwargs), what=what, modified=modified)
        if modified:
            raise InputModified(what, modified)
        return value

    def tracked(self, *args: Any, **kwargs: Any) -> Tracked:
        """Call the object; the value and the arguments it changed in place."""
        modified: list[str] = []
        what = f"{self._short}(...)"
        value = self._session.request(self._message(args, kwargs), what=what, modified=modified)
        return Tracked(value, modified)

    def __getattr__(self, attr: str) -> RemoteMethod:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return RemoteMethod(self, attr)

    def method(self, attr: str) -> RemoteMethod:
        return RemoteMethod(self, attr)

    def get(self, attr: str) -> Any:
        """Read an attribute: plain data, or another Remote (e.g. a submodule)."""
        return self._session.request(
            {"op": "getattr", "target": self._handle, "attr": attr},
            what=f"{self._short}.{attr}",
        )

    def backward(self, *args: Any, grad_output: Any = None, **kwargs: Any) -> Gradients:
        msg = {"op": "backward", "target": self._handle, "args": _encode(args)}
        msg.update(kwargs=_encode(kwargs), grad_output=_encode(grad_output))
        return _gradients(self._session.request(msg, what=f"{self._short} backward"))

    def __repr__(self) -> str:
        return f"<student object {self.type_name}>"


class Student:
    """The submitted notebook's definitions, reachable only through the sandbox."""

    def __init__(self, session: WorkerSession):
        self._session = session

    def __getattr__(self, name: str) -> RemoteFunction:
        if name.startswith("__"):
            raise AttributeError(name)
        return RemoteFunction(self._session, name)

    def __getitem__(self, name: str) -> RemoteFunction:
        return RemoteFunction(self._session, name)

    def names(self) -> dict[str, str]:
        """Module-level names the notebook defines, with their type names."""
        return self._session.request({"op": "names"}, what="listing your definitions")

    def build(self, name: str, *args: Any, state_dict: dict | None = None, **kwargs: Any) -> Any:
        """Build a library object inside the worker (``name`` is a dotted path such as
        ``"course_lib.models.seq2seq.Encoder"``), e.g. to pass a reference module to the
        student's code; ``state_dict`` is loaded into it. Calls the student's code then makes
        into it count for forbidden-call detection, so do not forbid what you build."""
        msg = {"op": "build", "name": name, "args": _encode(args), "kwargs": _encode(kwargs)}
        msg["state_dict"] = _encode(state_dict)
        return self._session.request(msg, what=f"building {name}")

    def has(self, name: str) -> bool:
        return name in self.names()

    def get(self, name: str) -> Any:
        """The value of a module-level name (plain data, or a Remote)."""
        if not self.has(name):
            raise MissingDefinition("NameError", f"your notebook does not define {name!r}")
        return self._session.request({"op": "getattr", "target": None, "attr": name}, what=name)
