"""Forbidden calls: how a hidden test says "write this by hand", and how it is enforced.

A test declares ``@pytest.mark.forbid("sdpa", "multihead_attention", "course_lib.attention")``.
Each entry is either a preset below or a spec:

- a dotted Python name: a torch function or method (``torch.nn.functional.softmax``,
  ``torch.Tensor.softmax``), an ``nn.Module`` class (``torch.nn.MultiheadAttention``), a Python
  function, or a whole module (``course_lib.attention``: every function and class in it);
- an ATen operator glob, ``aten::*scaled_dot_product*``.

Enforcement is twofold. In the trusted process a static scan of the code the worker will run
(:mod:`autograder.scan`) flags references through any import alias. In the worker, every call
that test makes runs under a ``TorchFunctionMode`` (torch functions, by identity), a
``TorchDispatchMode`` (ATen op names), a global module forward pre-hook (module classes) and a
profile hook (plain Python functions), so indirections such as ``getattr(F, "scaled_" + ...)``,
an alias, or a module that calls the forbidden function internally are caught too.

These watch one thread, inside the student's interpreter, so the sandbox keeps them there and
out of reach (:mod:`autograder.sandbox.audit`): threads are refused (by the kernel where the worker
has a uid of its own), the grader's modules cannot be imported, and the routes to the detector's
objects (``gc``, frames, trace and profile hooks, new code objects) are refused to student code
and reported: such a test fails as tampering.
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import os
import sys
import types
from typing import Any

PRESETS: dict[str, tuple[str, ...]] = {
    "sdpa": (
        "torch.nn.functional.scaled_dot_product_attention",
        "aten::*scaled_dot_product*",
    ),
    "multihead_attention": (
        "torch.nn.MultiheadAttention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch._native_multi_head_attention",
        "aten::_native_multi_head_attention",
    ),
    "transformer_modules": (
        "torch.nn.Transformer",
        "torch.nn.TransformerEncoder",
        "torch.nn.TransformerDecoder",
        "torch.nn.TransformerEncoderLayer",
        "torch.nn.TransformerDecoderLayer",
    ),
    "layer_norm": (
        "torch.nn.LayerNorm",
        "torch.nn.functional.layer_norm",
        "torch.layer_norm",
        "torch.native_layer_norm",
        "aten::native_layer_norm",
    ),
    "softmax": (
        "torch.softmax",
        "torch.nn.functional.softmax",
        "torch.Tensor.softmax",
        "torch.nn.Softmax",
        "aten::_softmax",
        "aten::_safe_softmax",
    ),
    "rnn_modules": ("torch.nn.GRU", "torch.nn.LSTM", "torch.nn.RNN"),
    "course_lib": (
        "course_lib.attention",
        "course_lib.layers",
        "course_lib.positional",
        "course_lib.masking",
        "course_lib.models",
        "course_lib.vision",
        "course_lib.checks",
    ),
}


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


def expand(names: list[str] | tuple[str, ...]) -> list[str]:
    """Presets replaced by their specs, duplicates removed, order kept."""
    out: list[str] = []
    for name in names:
        for spec in PRESETS.get(name, (name,)):
            if spec not in out:
                out.append(spec)
    return out


def validate(names: list[str] | tuple[str, ...]) -> list[str]:
    """Error messages for specs that are neither presets, aten globs nor dotted names."""
    bad = []
    for name in names:
        if not isinstance(name, str) or not name:
            bad.append(f"forbid entry {name!r} is not a non-empty string")
        elif name in PRESETS or name.startswith("aten::"):
            continue
        elif not all(part.isidentifier() for part in name.split(".")):
            bad.append(
                f"forbid entry {name!r} is neither a preset ({', '.join(PRESETS)}), an 'aten::' "
                "glob nor a dotted Python name"
            )
    return bad


def resolve(spec: str) -> Any:
    """Import the object a dotted spec names; None if it cannot be found."""
    parts = spec.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def is_module_spec(spec: str) -> bool:
    return isinstance(resolve(spec), types.ModuleType)


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
