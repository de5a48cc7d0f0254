"""Runtime detection of forbidden calls: runs inside the worker around each call a test makes.

The spec language (presets, names, ``aten::`` globs) is :mod:`autograder.wire.forbid`, which the
trusted side reads too; this module is the sandbox's half.

Nothing student code can replace decides what is forbidden. :func:`freeze` runs in the zygote,
before any student byte: it snapshots ``sys.modules`` and every module's namespace, resolves
every preset's specs into tables (code objects, callables by identity, classes, source files),
and the torch and ``sys`` primitives the detector uses are bound when this module is imported
(also in the zygote). A spec is never resolved through ``importlib`` or ``sys.modules`` once
student code may have run: replacing ``course_lib.*`` in ``sys.modules``, a module's attributes,
``sys.setprofile`` or a builtin does not blind it. This module keeps a private copy of the
builtins for the same reason.
"""

from __future__ import annotations

import builtins as _builtins_module

__builtins__ = dict(_builtins_module.__dict__)  # private: student code may replace builtins.*

import collections  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._device import DeviceContext  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from autograder.wire.forbid import PRESETS, expand  # noqa: E402

# Primitives bound now (in the zygote), so that replacing a module attribute later changes nothing.
_C = torch._C
_PUSH_FUNCTION_MODE = _C._push_on_torch_function_stack
_POP_FUNCTION_MODE = _C._pop_torch_function_stack
_FUNCTION_MODES = _C._len_torch_function_stack
_FUNCTION_MODE_AT = _C._get_function_stack_at
_PUSH_DISPATCH_MODE = _C._push_on_torch_dispatch_stack
_POP_DISPATCH_MODE = _C._pop_torch_dispatch_stack
_DISPATCH_MODES = _C._len_torch_dispatch_stack
_DISPATCH_MODE_AT = _C._get_dispatch_stack_at
_SETPROFILE, _GETPROFILE = sys.setprofile, sys.getprofile
_MODULE_GLOBALS = torch.nn.modules.module.__dict__  # where _global_forward_pre_hooks lives
_SCRIPT_MODULE = torch.jit.ScriptModule
_FUNCTION_TYPE, _MODULE_TYPE = types.FunctionType, types.ModuleType
_NN_MODULE = torch.nn.Module
_DICT_SETITEM, _DICT_POP, _DICT_GET = dict.__setitem__, dict.pop, dict.get
_MISSING = object()

# -- the snapshot (filled by freeze(), in the zygote) -----------------------------------------
_MODULES: dict[str, tuple[types.ModuleType, dict, str | None, bool]] = {}
_FILES: dict[str, str] = {}  # source file -> module name (for messages)
_CATALOGUE: dict[str, _Part] = {}
# C entry points that compile or register code the detector cannot watch (TorchScript, custom
# operators): calling one while a test forbids anything is a violation (the worker also refuses
# them, see autograder.sandbox.audit.refuse_compilers).
UNWATCHABLE: dict[int, str] = {}
COMPILERS = (
    "_jit_script_compile", "_jit_script_compile_overload", "_jit_script_class_compile",
    "_jit_script_interface_compile", "_jit_trace_module", "_create_function_from_trace",
    "_create_function_from_trace_with_dict", "import_ir_module", "import_ir_module_from_buffer",
    "_import_ir_module_from_package", "_dispatch_library", "_create_module_with_type",
)  # fmt: skip
_KEEP = [getattr(_C, _name) for _name in COMPILERS if hasattr(_C, _name)]  # ids stay theirs
for _name, _original in zip([n for n in COMPILERS if hasattr(_C, n)], _KEEP):
    UNWATCHABLE[id(_original)] = f"torch._C.{_name} (compiled or registered code)"
# torch's mode stacks: student code that calls one of these itself (a name built at run time)
# is tampering, even if it puts the stack back before returning; library code may (a
# ``with torch.device(...)`` pushes a mode).
MODE_STACK: dict[int, str] = {}
for _name in ("_push_on_torch_function_stack", "_pop_torch_function_stack",
              "_push_on_torch_dispatch_stack", "_pop_torch_dispatch_stack", "_set_dispatch_mode",
              "_unset_dispatch_mode"):  # fmt: skip
    if hasattr(_C, _name):
        _KEEP.append(getattr(_C, _name))
        MODE_STACK[id(_KEEP[-1])] = f"torch._C.{_name}"
_DEVICE_CONTEXT = DeviceContext  # torch.set_default_device's mode: harmless
_LIBRARY: list[tuple[str, ...]] = [()]  # filled by freeze(): folders whose files are library code
TAMPERED_STACKS = "tampering: torch's mode stacks were changed by student code"


def mode_stacks() -> tuple[tuple, tuple]:
    """The modes on torch's function and dispatch stacks, bottom first (the default device's
    mode left out: ``torch.set_default_device`` is an honest student's call)."""
    functions = tuple(_FUNCTION_MODE_AT(i) for i in range(_FUNCTION_MODES()))
    dispatch = tuple(_DISPATCH_MODE_AT(i) for i in range(_DISPATCH_MODES()))
    return tuple(m for m in functions if type(m) is not _DEVICE_CONTEXT), dispatch


def same_stacks(before: tuple[tuple, tuple], after: tuple[tuple, tuple]) -> bool:
    """The same modes in the same order, by identity (a mode's ``__eq__`` is not asked)."""
    return all(
        len(a) == len(b) and all(x is y for x, y in zip(a, b)) for a, b in zip(before, after)
    )


def _own_codes(func: Any) -> list[types.CodeType]:
    """The code objects that are this function's own: a decorated function (``@torch.no_grad()``,
    ``functools.wraps``) is followed to what it wraps, and the wrapper's code, shared by every
    function the same decorator wraps (a student's too), is left out."""
    if not isinstance(func, _FUNCTION_TYPE):
        return []
    inner = func
    while isinstance(getattr(inner, "__wrapped__", None), _FUNCTION_TYPE):
        inner = inner.__wrapped__
    if inner is func:
        return [func.__code__]
    own = [inner.__code__]
    if func.__code__.co_filename == inner.__code__.co_filename:  # a decorator of the same module
        own.append(func.__code__)
    return own


class _Part:
    """What one spec forbids, resolved from the snapshot."""

    def __init__(self, spec: str):
        self.functions: dict[int, str] = {}  # id(torch callable) -> spec
        self.keep: list[Any] = []  # the callables themselves: their ids stay theirs
        self.function_names: dict[str, str] = {}
        self.classes: list[tuple[type, str]] = []
        self.codes: dict[types.CodeType, str] = {}
        self.files: dict[str, str] = {}  # source file or package folder -> spec
        if spec.startswith("aten::"):
            return
        obj = resolve(spec)
        if obj is not None:
            self._add(obj, spec)

    def _add(self, obj: Any, spec: str, depth: int = 0) -> None:
        if isinstance(obj, _MODULE_TYPE):
            if depth:
                return
            name = next((n for n, e in _MODULES.items() if e[0] is obj), None)
            if name is None:
                return
            _, _, origin, is_package = _MODULES[name]
            if origin:  # catches functions of submodules imported later, too
                self.files[os.path.dirname(origin) + os.sep if is_package else origin] = spec
            for sub, (_module, namespace, _, _) in list(_MODULES.items()):
                if sub == name or sub.startswith(name + "."):
                    for value in list(namespace.values()):
                        if getattr(value, "__module__", None) == sub:
                            self._add(value, spec, depth + 1)
            return
        if isinstance(obj, type):
            if issubclass(obj, _NN_MODULE):
                self.classes.append((obj, spec))
            for value in vars(obj).values():
                for code in _own_codes(getattr(value, "__func__", value)):
                    self.codes[code] = spec
            return
        func = getattr(obj, "__func__", obj)
        for code in _own_codes(func):
            self.codes[code] = spec
        self.functions[id(obj)] = spec
        self.keep.append(obj)
        name = getattr(obj, "__name__", None)
        if name and not isinstance(func, _FUNCTION_TYPE):
            self.function_names[name] = spec


def freeze() -> None:
    """Snapshot the interpreter's modules and resolve every preset (the zygote calls this once,
    before any student code; later calls do nothing)."""
    if _MODULES:
        return
    from autograder.sandbox.audit import library_prefixes

    own = os.path.join(os.path.dirname(os.path.realpath(__file__)), "")
    _LIBRARY[0] = (*library_prefixes(), own)  # the worker's and the detector's own files too
    for name, module in list(sys.modules.items()):
        if not isinstance(module, _MODULE_TYPE):
            continue
        try:
            namespace = dict(vars(module))
        except TypeError:
            continue
        origin = namespace.get("__file__")
        origin = origin if isinstance(origin, str) else None
        _MODULES[name] = (module, namespace, origin, "__path__" in namespace)
        if origin:
            _FILES.setdefault(origin, name)
    for preset in PRESETS:
        for spec in expand([preset]):
            _CATALOGUE.setdefault(spec, _Part(spec))
    for name in list(_MODULES):
        if name.startswith("course_lib."):
            _CATALOGUE.setdefault(name, _Part(name))


def resolve(spec: str) -> Any:
    """The object a dotted spec names, looked up in the snapshot (never through ``importlib``);
    None if the snapshot does not hold it."""
    freeze()
    parts = spec.split(".")
    for cut in range(len(parts), 0, -1):
        entry = _MODULES.get(".".join(parts[:cut]))
        if entry is None:
            continue
        obj: Any = entry[0]
        rest = parts[cut:]
        if rest:
            obj = entry[1].get(rest[0], _MISSING)
            for attr in rest[1:]:
                if obj is _MISSING:
                    break
                obj = getattr(obj, attr, _MISSING)
        return None if obj is _MISSING else obj
    return None


# ---------------------------------------------------------------------------------------------
# Runtime detection (runs inside the worker around each call a test makes)
# ---------------------------------------------------------------------------------------------

_ACTIVE: list[Any] = [None]  # the detector that is on, if any


class _Functions(TorchFunctionMode):
    def __init__(self) -> None:
        pass

    def __torch_function__(self, func, types, args=(), kwargs=None):
        detector = _ACTIVE[0]
        if detector is not None:
            spec = detector.functions.get(id(func))
            if spec is None and not isinstance(func, _FUNCTION_TYPE):
                spec = detector.function_names.get(getattr(func, "__name__", ""))
            if spec is not None:
                detector._record(_qualname(func), spec)
        return func(*args, **(kwargs or {}))


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        self.old_dispatch_mode_flags = collections.deque()
        self.old_non_infra_dispatch_mode_flags = collections.deque()
        self.old_without_ignore_compile_internals_dispatch_mode_flags = collections.deque()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:  # avoids a 6 s import of torch._dynamo
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        detector = _ACTIVE[0]
        if detector is not None:
            name = func._schema.name
            for pattern in detector.aten:
                if _glob(name, pattern):
                    detector._record(name, pattern)
        return func(*args, **(kwargs or {}))


_FUNCTION_MODE = _Functions()
_DISPATCH_MODE = _Ops()
# classes student code may not change (the audit hook refuses setattr / delattr on them)
PROTECTED: tuple = (_Functions, _Ops, TorchFunctionMode, TorchDispatchMode)


def _pre_hook(module: Any, args: Any) -> None:
    detector = _ACTIVE[0]
    if detector is None:
        return
    for cls, spec in detector.classes:
        if isinstance(module, cls):
            detector._record(f"{cls.__module__}.{cls.__qualname__}", spec)
    if detector.any and isinstance(module, _SCRIPT_MODULE):
        detector._record("a TorchScript module (compiled code cannot be checked)", "torch.jit")


def _profiler(frame: Any, event: str, arg: Any) -> None:
    detector = _ACTIVE[0]
    if detector is None:
        return
    if event == "call":
        code = frame.f_code
        if code in detector.seen:
            return
        spec = detector.codes.get(code)
        if spec is None and detector.prefixes and code.co_filename.startswith(detector.prefixes):
            spec = next(v for k, v in detector.files.items() if code.co_filename.startswith(k))
        if spec is not None:
            detector.seen.add(code)
            detector._record(_code_name(code), spec)
    elif event == "c_call":  # a forbidden C function called from Python, modes or not
        spec = detector.functions.get(id(arg))
        if spec is not None:
            detector._record(_qualname(arg), spec)
        elif detector.any and id(arg) in UNWATCHABLE:
            detector._record(UNWATCHABLE[id(arg)], "torch.jit")
        elif id(arg) in MODE_STACK and not frame.f_code.co_filename.startswith(_LIBRARY[0]):
            detector._record(f"{TAMPERED_STACKS} ({MODE_STACK[id(arg)]})", "tampering")


def _glob(name: str, pattern: str) -> bool:
    """fnmatch's ``*`` and ``?`` (the aten specs' language), with no library code."""
    if not pattern:
        return not name
    head = pattern[0]
    if head == "*":
        return any(_glob(name[i:], pattern[1:]) for i in range(len(name) + 1))
    if not name:
        return False
    return (head == "?" or head == name[0]) and _glob(name[1:], pattern[1:])


class Detector:
    """Context manager that records forbidden calls made while it is active."""

    def __init__(self, specs: list[str]):
        freeze()
        self.violations: list[str] = []
        self.aten: list[str] = [s for s in specs if s.startswith("aten::")]
        self.functions: dict[int, str] = {}
        self.function_names: dict[str, str] = {}
        self.classes: list[tuple[type, str]] = []
        self.codes: dict[types.CodeType, str] = {}
        self.files: dict[str, str] = {}
        self.keep: list[Any] = []
        self.any = bool(specs)
        for spec in specs:
            part = _CATALOGUE.get(spec)
            if part is None:
                part = _CATALOGUE[spec] = _Part(spec)
            self.functions.update(part.functions)
            self.function_names.update(part.function_names)
            self.classes.extend(part.classes)
            self.codes.update(part.codes)
            self.files.update(part.files)
            self.keep.extend(part.keep)
        self.prefixes = tuple(self.files)
        self.seen: set[types.CodeType] = set()
        self._profile: Any = None
        self._hook_key: Any = None
        self._hooks: Any = None
        self._modes = (False, False)

    def _record(self, what: str, spec: str) -> None:
        message = what if what == spec else f"{what} (forbidden by {spec!r})"
        if message not in self.violations:
            self.violations.append(message)

    def __enter__(self) -> Detector:
        """Only C functions and this module's own code run here (the worker calls it while the
        audit hook trusts it)."""
        _ACTIVE[0] = self
        self.seen = set()  # per call: each call's first use of a forbidden function is reported
        self._stacks = mode_stacks()  # the call must leave them as they are
        if not self.any:
            return self
        self._modes = (bool(self.functions or self.function_names), bool(self.aten))
        if self._modes[0]:
            _PUSH_FUNCTION_MODE(_FUNCTION_MODE)
        if self._modes[1]:
            _PUSH_DISPATCH_MODE(_DISPATCH_MODE)
        hooks = _DICT_GET(_MODULE_GLOBALS, "_global_forward_pre_hooks")
        if type(hooks) is dict or isinstance(hooks, collections.OrderedDict):
            self._hooks, self._hook_key = hooks, ("autograder", id(self))
            _DICT_SETITEM(hooks, self._hook_key, _pre_hook)
        self._profile = _GETPROFILE()
        _SETPROFILE(_profiler)
        return self

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE[0] = None
        if not self.any:
            self._check_stacks()
            return
        _SETPROFILE(self._profile)
        if self._hooks is not None:
            _DICT_POP(self._hooks, self._hook_key, None)
            self._hooks = None
        intact = True
        if self._modes[1]:
            if _DISPATCH_MODES() and _DISPATCH_MODE_AT(_DISPATCH_MODES() - 1) is _DISPATCH_MODE:
                _POP_DISPATCH_MODE(None)
            else:
                intact = False
        if self._modes[0]:
            if _FUNCTION_MODES() and _FUNCTION_MODE_AT(_FUNCTION_MODES() - 1) is _FUNCTION_MODE:
                _POP_FUNCTION_MODE()
            else:
                intact = False
        if not intact:  # student code popped the detector's modes
            self._record("the forbidden-call detector's torch modes were removed", "tampering")
        else:
            self._check_stacks()

    def _check_stacks(self) -> None:
        if not same_stacks(self._stacks, mode_stacks()):  # a mode added, removed or swapped
            self._record(f"{TAMPERED_STACKS} (a mode added or removed)", "tampering")


PROTECTED += (Detector, _Part)


def _qualname(func: Any) -> str:
    module = getattr(func, "__module__", None)
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    if isinstance(module, str) and module.startswith("torch._C"):
        module = "torch"
    return f"{module}.{name}" if module else str(name)


def _code_name(code: types.CodeType) -> str:
    module = _FILES.get(code.co_filename)
    if module is None:
        module = os.path.splitext(os.path.basename(code.co_filename))[0] or code.co_filename
    return f"{module}.{getattr(code, 'co_qualname', code.co_name)}"
