"""Runtime detection of forbidden calls: runs inside the worker around each call a test makes.

The spec language (presets, names, ``aten::`` globs) is :mod:`autograder.wire.forbid`, which the
trusted side reads too; this module is the sandbox's half."""

from __future__ import annotations

import fnmatch
import inspect
import os
import sys
import types
from typing import Any

from autograder.wire.forbid import resolve


def _own_codes(func: Any) -> list[types.CodeType]:
    """The code objects that are this function's own: a decorated function (``@torch.no_grad()``,
    ``functools.wraps``) is followed to what it wraps, and the wrapper's code, shared by every
    function the same decorator wraps (a student's too), is left out."""
    if not isinstance(func, types.FunctionType):
        return []
    inner = func
    while isinstance(getattr(inner, "__wrapped__", None), types.FunctionType):
        inner = inner.__wrapped__
    if inner is func:
        return [func.__code__]
    own = [inner.__code__]
    if func.__code__.co_filename == inner.__code__.co_filename:  # a decorator of the same module
        own.append(func.__code__)
    return own


# ---------------------------------------------------------------------------------------------
# Runtime detection (runs inside the worker around each call a test makes)
# ---------------------------------------------------------------------------------------------


class Detector:
    """Context manager that records forbidden calls made while it is active."""

    def __init__(self, specs: list[str]):
        import torch

        self.violations: list[str] = []
        self.aten: list[str] = [s for s in specs if s.startswith("aten::")]
        self.functions: dict[int, str] = {}  # id(torch callable) -> spec
        self.function_names: dict[str, str] = {}
        self.classes: list[tuple[type, str]] = []
        self.codes: dict[types.CodeType, str] = {}
        self.files: dict[str, str] = {}  # source file or package folder -> spec
        for spec in specs:
            if spec.startswith("aten::"):
                continue
            obj = resolve(spec)
            if obj is None:
                continue
            self._add(obj, spec, torch)
        self._stack: list[Any] = []

    def _add(self, obj: Any, spec: str, torch: Any, depth: int = 0) -> None:
        if isinstance(obj, types.ModuleType):
            if depth:
                return
            origin = getattr(obj, "__file__", None)
            if origin:  # catches functions of submodules imported later, too
                is_package = hasattr(obj, "__path__")
                self.files[os.path.dirname(origin) + os.sep if is_package else origin] = spec
            prefix = obj.__name__
            modules = [
                m
                for name, m in list(sys.modules.items())
                if m is not None and (name == prefix or name.startswith(prefix + "."))
            ]
            for module in modules:
                for value in list(vars(module).values()):
                    if getattr(value, "__module__", None) == module.__name__:
                        self._add(value, spec, torch, depth + 1)
            return
        if isinstance(obj, type):
            if issubclass(obj, torch.nn.Module):
                self.classes.append((obj, spec))
            for value in vars(obj).values():
                for code in _own_codes(getattr(value, "__func__", value)):
                    self.codes[code] = spec
            return
        func = getattr(obj, "__func__", obj)
        for code in _own_codes(func):
            self.codes[code] = spec
        self.functions[id(obj)] = spec
        name = getattr(obj, "__name__", None)
        if name and not isinstance(func, types.FunctionType):
            self.function_names[name] = spec

    def _record(self, what: str, spec: str) -> None:
        message = what if what == spec else f"{what} (forbidden by {spec!r})"
        if message not in self.violations:
            self.violations.append(message)

    def __enter__(self) -> Detector:
        import torch
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        detector = self
        if self.functions or self.function_names:

            class _Functions(TorchFunctionMode):
                def __torch_function__(self, func, types, args=(), kwargs=None):
                    spec = detector.functions.get(id(func))
                    if spec is None and not isinstance(func, types_function):
                        spec = detector.function_names.get(getattr(func, "__name__", ""))
                    if spec is not None:
                        detector._record(_qualname(func), spec)
                    return func(*args, **(kwargs or {}))

            types_function = types.FunctionType
            self._enter(_Functions())
        if self.aten:

            class _Ops(TorchDispatchMode):
                @classmethod
                def _should_skip_dynamo(cls) -> bool:  # avoids a 6 s import of torch._dynamo
                    return False

                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    name = func._schema.name
                    for pattern in detector.aten:
                        if fnmatch.fnmatchcase(name, pattern):
                            detector._record(name, pattern)
                    return func(*args, **(kwargs or {}))

            self._enter(_Ops())
        if self.classes:

            def pre_hook(module, args):
                for cls, spec in detector.classes:
                    if isinstance(module, cls):
                        detector._record(f"{cls.__module__}.{cls.__qualname__}", spec)

            handle = torch.nn.modules.module.register_module_forward_pre_hook(pre_hook)
            self._stack.append(("hook", handle))
        if self.codes or self.files:
            codes, files = self.codes, self.files
            prefixes = tuple(files)
            seen: set[types.CodeType] = set()

            def profiler(frame, event, arg):
                if event == "call" and frame.f_code not in seen:
                    code = frame.f_code
                    spec = codes.get(code)
                    if spec is None and prefixes and code.co_filename.startswith(prefixes):
                        spec = next(v for k, v in files.items() if code.co_filename.startswith(k))
                    if spec is not None:
                        seen.add(code)
                        detector._record(_code_name(code), spec)

            self._stack.append(("profile", sys.getprofile()))
            sys.setprofile(profiler)
        return self

    def _enter(self, mode: Any) -> None:
        mode.__enter__()
        self._stack.append(("mode", mode))

    def __exit__(self, *exc: Any) -> None:
        while self._stack:
            kind, obj = self._stack.pop()
            if kind == "mode":
                obj.__exit__(None, None, None)
            elif kind == "hook":
                obj.remove()
            elif kind == "profile":
                sys.setprofile(obj)


def _qualname(func: Any) -> str:
    module = getattr(func, "__module__", None)
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    if module and module.startswith("torch._C"):
        module = "torch"
    return f"{module}.{name}" if module else str(name)


def _code_name(code: types.CodeType) -> str:
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == code.co_filename:
            return f"{name}.{getattr(code, 'co_qualname', code.co_name)}"
    module = inspect.getmodulename(code.co_filename) or code.co_filename
    return f"{module}.{getattr(code, 'co_qualname', code.co_name)}"
