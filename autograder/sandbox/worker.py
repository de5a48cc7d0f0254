"""The worker's side of the protocol: load the student's code, serve calls, send plain data.

Runs inside a sandboxed worker (see :mod:`autograder.sandbox`) after containment is in place. The
student's code becomes the worker's ``__main__`` module; objects that are not plain data stay in a
handle table and cross as markers. Every call runs under the test's forbidden-call detector
(:mod:`autograder.sandbox.detector`) with ``print`` output captured (bounded), and any exception,
including
``SystemExit``, becomes an error reply carrying only the student's own traceback frames.

Tracebacks are rendered by walking the traceback's C attributes and reading lines from the
worker's own copy of the student's source: no ``linecache`` (whose lazy loaders student code can
register), no ``traceback`` module, nothing student code can replace runs while the worker is
trusted. This module keeps a private copy of the builtins for the same reason.
"""

from __future__ import annotations

import builtins as _builtins_module

__builtins__ = dict(_builtins_module.__dict__)  # private: student code may replace builtins.*

import ast  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import linecache  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

from autograder.sandbox.detector import (  # noqa: E402
    TAMPERED_STACKS,
    Detector,
    mode_stacks,
    resolve,
    same_stacks,
    seal,
)
from autograder.wire import protocol  # noqa: E402

_TRACEBACK = BaseException.__dict__["__traceback__"]  # the C slot, not a property of a subclass
_TYPE_NAME = type.__dict__["__name__"]

# Bound at import, before student code runs: what compares a call's arguments before and after
# is nothing student code can replace (torch.equal, Tensor.clone, ...).
_TENSOR = torch.Tensor
_CLONE, _DETACH, _RESHAPE, _VIEW = _TENSOR.clone, _TENSOR.detach, _TENSOR.reshape, _TENSOR.view
_SIZE, _DTYPE = torch._C.TensorBase.__dict__["shape"], torch._C.TensorBase.__dict__["dtype"]
_EQUAL, _UINT8 = torch.equal, torch.uint8
_DISABLE_TORCH_FUNCTION = torch._C.DisableTorchFunction
_PLAIN_SCALARS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
_FUNCTION, _METHOD, _MODULE = types.FunctionType, types.MethodType, torch.nn.Module
_MRO, _CLASS_DICT = type.__dict__["__mro__"], type.__dict__["__dict__"]


# Load notes reach the student's feedback: a few short lines, so that load-time code cannot dump
# what the worker holds (a reference's bytecode) into them.
MAX_LOAD_NOTES = 5


class _Missing(NameError):
    """The test asked for a name the notebook does not define (not a NameError raised inside
    the student's code)."""


def _capture_init(self: Any, limit: int = 4000) -> None:
    self.limit, self.parts, self.size, self.dropped = limit, [], 0, 0


def _capture_writable(self: Any) -> bool:
    return True


def _capture_write(self: Any, text: Any, _str: Any = str, _len: Any = len, _min: Any = min,
                   _max: Any = max) -> int:  # fmt: skip
    text = _str(text)
    room = self.limit - self.size
    if room > 0:
        self.parts.append(text[:room])
        self.size += _min(room, _len(text))
    self.dropped += _max(0, _len(text) - _max(room, 0))
    return _len(text)


def _capture_text(self: Any) -> str:
    out = "".join(self.parts)
    return out + (f"\n[... {self.dropped} more characters]" if self.dropped else "")


class _Capture(io.TextIOBase):
    """Keeps the first ``limit`` characters written; the rest is counted and dropped. Student
    code holds it (``sys.stdout``): its methods are sealed (no globals, no closure), so it leads
    nowhere (``type(sys.stdout).write.__globals__`` is an empty namespace)."""

    __init__ = seal(_capture_init)
    writable = seal(_capture_writable)
    write = seal(_capture_write)
    text = seal(_capture_text)


def _snapshot(value: Any) -> Any:
    """A copy of an argument as the test sent it: tensors cloned, lists, tuples and dicts copied
    (they hold only plain data and handles); anything else (a handle's object) by identity."""
    kind = type(value)
    if kind is _TENSOR:
        with _DISABLE_TORCH_FUNCTION():
            return _CLONE(_DETACH(value))
    if kind is list or kind is tuple:
        return kind(_snapshot(v) for v in value)
    if kind is dict:
        return {k: _snapshot(v) for k, v in value.items()}
    return value


def _same(before: Any, after: Any) -> bool:
    """Whether ``after`` (the argument as the call left it) still equals its snapshot. Strict:
    the same exact types (an object whose ``__eq__`` says yes is a change), tensors the same
    shape, dtype and bytes (NaN and -0.0 included)."""
    kind = type(before)
    if type(after) is not kind:
        return False
    if kind is _TENSOR:
        with _DISABLE_TORCH_FUNCTION():
            if _SIZE.__get__(after) != _SIZE.__get__(before):
                return False
            if _DTYPE.__get__(after) != _DTYPE.__get__(before):
                return False
            flat_before, flat_after = _RESHAPE(before, (-1,)), _RESHAPE(after, (-1,))
            return _EQUAL(_VIEW(flat_before, _UINT8), _VIEW(flat_after, _UINT8))
    if kind is list or kind is tuple:
        return len(after) == len(before) and all(map(_same, before, after))
    if kind is dict:
        if len(after) != len(before):
            return False
        for key, value in after.items():
            if type(key) not in _PLAIN_SCALARS or key not in before:
                return False
            if not _same(before[key], value):
                return False
        return True
    if kind is float:
        return before == after or (before != before and after != after)  # NaN stays NaN
    if kind in _PLAIN_SCALARS:
        return before == after
    return before is after  # a handle's object: its own state is not an argument's value


def _parameter_names(fn: Any) -> list[str]:
    """The names of ``fn``'s positional parameters, read from its code object (no student code
    runs: no ``inspect``, no ``__signature__``); empty where they cannot be read that way."""
    skip = 0
    if type(fn) is _METHOD:
        fn, skip = fn.__func__, 1
    elif issubclass(type(fn), _MODULE):
        for klass in _MRO.__get__(type(fn)):
            namespace = _CLASS_DICT.__get__(klass)
            if "forward" in namespace:
                fn, skip = namespace["forward"], 1
                break
    if type(fn) is not _FUNCTION:
        return []
    code = fn.__code__
    return list(code.co_varnames[skip : code.co_argcount])


def _modified(fn: Any, args: tuple, kwargs: dict, before: tuple) -> list[str]:
    """The arguments a call changed in place, by name where the signature gives one."""
    names, changed = _parameter_names(fn), []
    for index, (was, now) in enumerate(zip(before[0], args)):
        if not _unchanged(was, now):
            name = names[index] if index < len(names) else None
            changed.append(name if name else f"positional argument {index + 1}")
    for key, now in kwargs.items():
        if key in before[1] and not _unchanged(before[1][key], now):
            changed.append(str(key))
    return changed


def _unchanged(before: Any, after: Any) -> bool:
    try:
        return _same(before, after) is True
    except Exception:  # e.g. a tensor the call made sparse: not the argument it was given
        return False


class _Watching:
    def __init__(self, trust: Any, detector: Detector):
        self.trust, self.detector = trust, detector

    def __enter__(self) -> Detector:
        with self.trust:
            self.detector.__enter__()
        return self.detector

    def __exit__(self, *exc: Any) -> None:
        with self.trust:
            self.detector.__exit__(None, None, None)


class Server:
    """Serves the trusted process's requests inside the worker."""

    def __init__(self, sock: socket.socket, cwd: str, trust: Any = None):
        self.sock, self.cwd = sock, cwd
        self.trust = trust if trust is not None else contextlib.nullcontext()
        self.module = types.ModuleType("__main__")
        self.module.__dict__["__builtins__"] = _builtins_module
        sys.modules["__main__"] = self.module
        self.handles: dict[int, Any] = {}
        self.labels: set[str] = set()
        self.detectors: dict[tuple, Detector] = {}
        self.seed: int | None = None
        self.sources: dict[str, list[str]] = {}  # label -> lines, the worker's own copy

    def serve(self) -> None:
        while True:
            try:
                msg = protocol.recv(self.sock)
            except (EOFError, OSError):
                return
            op = msg.get("op")
            handler = getattr(self, f"op_{op}", None)
            capture = _Capture()
            old = sys.stdout, sys.stderr
            sys.stdout = sys.stderr = capture
            try:
                self._reseed(msg.get("seed"))
                reply = handler(msg) if handler else {"ok": False, "error": _err("unknown op")}
            except BaseException as error:  # noqa: B036 (SystemExit, KeyboardInterrupt too)
                reply = {"ok": False, "error": self._describe(error)}
            finally:
                sys.stdout, sys.stderr = old
            reply["output"] = capture.text()
            take = getattr(self.trust, "take", None)
            tampering = (take() if take else []) + reply.pop("tampering", [])
            if tampering:
                reply["tampering"] = tampering
            reply["nonce"] = msg.get("nonce")  # student code never sees it: it proves the reply
            try:
                protocol.send(self.sock, reply)
            except Exception as error:  # e.g. an unpicklable value slipped through
                protocol.send(self.sock, {"ok": False, "error": self._describe(error)})

    def _reseed(self, seed: int | None) -> None:
        if seed is not None and seed != self.seed:
            import numpy as np
            import torch

            self.seed = seed
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed % 2**32)

    # -- loading ---------------------------------------------------------------------------

    def op_load(self, msg: dict) -> dict:
        notes, failed = [], 0
        stacks = mode_stacks()  # load-time code must leave torch's mode stacks as they are
        with open("submission.py", "w", encoding="utf-8") as f:
            for label, source, _keep in msg["chunks"]:
                f.write(f"# ---- {label} ----\n{source}\n")
        for label, source, keep in msg["chunks"]:
            lines = source.splitlines(keepends=True)
            self.sources[label] = list(lines)
            linecache.cache[label] = (len(source), None, lines, label)  # the student's own use
            self.labels.add(label)
            getattr(self.trust, "labels", set()).add(label)
            tree = ast.parse(source, filename=label)
            for index in keep:
                stmt = tree.body[index]
                code = compile(ast.Module(body=[stmt], type_ignores=[]), label, "exec")
                try:
                    exec(code, self.module.__dict__)
                except BaseException as error:  # noqa: B036
                    info = self._describe(error)
                    failed += 1
                    if failed <= MAX_LOAD_NOTES:  # one short line each: no room for a dump
                        first = (info["message"].strip().splitlines() or [""])[0]
                        first = first if len(first) <= 160 else first[:159] + "…"
                        notes.append(f"{label}, line {stmt.lineno}: {info['type'][:60]}: {first}")
        if failed > MAX_LOAD_NOTES:
            notes.append(f"... and {failed - MAX_LOAD_NOTES} more statements that failed to load")
        names = {
            k: type(v).__name__ for k, v in self.module.__dict__.items() if not k.startswith("__")
        }
        reply = {"ok": True, "notes": notes, "names": names}
        if not same_stacks(stacks, mode_stacks()):
            reply["tampering"] = [f"{TAMPERED_STACKS} while loading (a mode added or removed)"]
        return reply

    # -- calls -----------------------------------------------------------------------------

    def _target(self, target: Any) -> Any:
        if target is None:
            return self.module
        if isinstance(target, int):
            if target not in self.handles:
                raise LookupError(f"no object with handle {target}")
            return self.handles[target]
        if target not in self.module.__dict__:
            raise _Missing(f"name {target!r} is not defined")
        return self.module.__dict__[target]

    def _keep(self, obj: Any) -> dict:
        handle = len(self.handles) + 1
        self.handles[handle] = obj
        return protocol.remote_marker(handle, obj)

    def _decode(self, obj: Any) -> Any:
        if protocol.is_remote_marker(obj):
            return self._target(obj[protocol.REMOTE_KEY])
        if isinstance(obj, dict):
            return {k: self._decode(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self._decode(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self._decode(v) for v in obj)
        return obj

    def _detector(self, forbid: list[str]) -> Detector:
        key = tuple(forbid)
        if key not in self.detectors:
            self.detectors[key] = Detector(list(forbid))
        detector = self.detectors[key]
        detector.violations = []
        return detector

    def _watching(self, detector: Detector) -> _Watching:
        """The detector on around student code; entering and leaving it are the worker's own
        acts (the audit hook refuses profile hooks and mode-stack access to student code). A
        class of this module, not ``contextlib``: nothing a student can replace (``next``)
        decides whether the detector is on."""
        return _Watching(self.trust, detector)

    def _callable(self, msg: dict) -> Any:
        obj = self._target(msg["target"])
        return getattr(obj, msg["attr"]) if msg.get("attr") else obj

    def op_call(self, msg: dict) -> dict:
        fn = self._callable(msg)
        args, kwargs = self._decode(msg.get("args", [])), self._decode(msg.get("kwargs", {}))
        detector = self._detector(msg.get("forbid", []))
        check = msg.get("check_args") is True
        before = (tuple(_snapshot(a) for a in args), _snapshot(kwargs)) if check else None
        try:
            with self._watching(detector):
                value = fn(*args, **kwargs)
        except BaseException as error:  # noqa: B036
            return {"ok": False, "error": self._describe(error), "violations": detector.violations}
        reply = {
            "ok": True,
            "value": protocol.to_plain(value, self._keep),
            "violations": detector.violations,
        }
        if check:
            reply["modified"] = _modified(fn, args, kwargs, before)
        return reply

    def op_getattr(self, msg: dict) -> dict:
        value = getattr(self._target(msg["target"]), msg["attr"])
        return {"ok": True, "value": protocol.to_plain(value, self._keep)}

    def op_build(self, msg: dict) -> dict:
        """Instantiate a library class (e.g. a course_lib reference module) inside the worker,
        for the test to hand to the student's code; optionally load a state dict into it."""
        cls = resolve(msg["name"])
        if cls is None:
            raise LookupError(f"cannot import {msg['name']!r} in the worker")
        obj = cls(*self._decode(msg.get("args", [])), **self._decode(msg.get("kwargs", {})))
        if msg.get("state_dict") is not None:
            obj.load_state_dict(msg["state_dict"])
        return {"ok": True, "value": protocol.to_plain(obj, self._keep)}

    def op_names(self, msg: dict) -> dict:
        names = {
            k: type(v).__name__ for k, v in self.module.__dict__.items() if not k.startswith("__")
        }
        return {"ok": True, "value": names}

    def op_backward(self, msg: dict) -> dict:
        import torch

        fn = self._callable(msg)
        owner = self._target(msg["target"])
        module = owner if isinstance(owner, torch.nn.Module) else None

        def leaf(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                return x.detach().clone().requires_grad_(True)
            return x

        args = [leaf(a) for a in self._decode(msg.get("args", []))]
        kwargs = {k: leaf(v) for k, v in self._decode(msg.get("kwargs", {})).items()}
        if module is not None:
            for p in module.parameters():
                p.grad = None
        grad_output = msg.get("grad_output")
        detector = self._detector(msg.get("forbid", []))
        try:
            with self._watching(detector):
                out = fn(*args, **kwargs)
                main = out
                while isinstance(main, (tuple, list)) and main:
                    main = main[0]
                if not isinstance(main, torch.Tensor):
                    raise TypeError(
                        f"expected a tensor output to differentiate, got {type(main).__name__}"
                    )
                if not main.requires_grad:
                    raise RuntimeError(
                        "the output does not depend differentiably on the inputs or parameters "
                        "(was it detached, or computed under torch.no_grad()?)"
                    )
                if grad_output is None:
                    main.sum().backward()
                else:
                    main.backward(grad_output)
        except BaseException as error:  # noqa: B036
            return {"ok": False, "error": self._describe(error), "violations": detector.violations}

        def grad(x: Any) -> Any:
            return x.grad if isinstance(x, torch.Tensor) and x.requires_grad else None

        value = {
            "output": out,
            "inputs": tuple(grad(a) for a in args),
            "kwargs": {k: grad(v) for k, v in kwargs.items()},
            "params": {n: p.grad for n, p in module.named_parameters()} if module else {},
        }
        return {
            "ok": True,
            "value": protocol.to_plain(value, self._keep),
            "violations": detector.violations,
        }

    def op_ping(self, msg: dict) -> dict:
        return {"ok": True, "value": os.getpid()}

    # -- errors ----------------------------------------------------------------------------

    def _describe(self, error: BaseException) -> dict:
        try:
            message = str(error)
            message = message if type(message) is str else "<not text>"
        except BaseException:  # noqa: B036
            message = "<the exception's message could not be formatted>"
        kind = _TYPE_NAME.__get__(type(error))
        tb = _TRACEBACK.__get__(error)
        frames = []
        with self.trust:  # reads tb_frame, refused to student code; runs no student code
            while tb is not None and len(frames) < 1000:
                code = tb.tb_frame.f_code
                frames.append((code.co_filename, tb.tb_lineno, code.co_name))
                tb = tb.tb_next
        lines = []
        for filename, lineno, name in [f for f in frames if f[0] in self.sources][-6:]:
            lines.append(f"  {filename}, line {lineno}, in {name}")
            source = self.sources[filename]
            if isinstance(lineno, int) and 0 < lineno <= len(source) and source[lineno - 1].strip():
                lines.append(f"    {source[lineno - 1].strip()}")
        if isinstance(error, SystemExit):
            message = f"your code called sys.exit({error.code!r})"
        out = {"type": kind, "message": message[:2000], "traceback": "\n".join(lines)}
        if type(error) is _Missing:
            out["missing"] = True
        return out


def _err(message: str) -> dict:
    return {"type": "GraderError", "message": message, "traceback": ""}
