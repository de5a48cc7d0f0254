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
import itertools  # noqa: E402
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
# torch's hook dict is an OrderedDict: dict.__setitem__ would bypass its order (never iterated)
_ODICT_SETITEM, _ODICT_POP = collections.OrderedDict.__setitem__, collections.OrderedDict.pop
_MISSING = object()

# -- the snapshot (filled by freeze(), in the zygote) -----------------------------------------
_MODULES: dict[str, tuple[types.ModuleType, dict, str | None, bool]] = {}
_FILES: dict[str, str] = {}  # source file -> module name (for messages)
_BUILTINS: dict[str, list] = {}  # "aten::name" -> torch's C functions of that name
_C_CALLABLES = (types.BuiltinFunctionType, types.MethodDescriptorType)
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
        if spec.startswith("aten::"):  # the torch builtins and ops of that name: what they are
            for name, builtins in _BUILTINS.items():
                if _glob(name, spec):
                    for builtin in builtins:
                        self.functions[id(builtin)] = spec
                        self.keep.append(builtin)
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
    for name, (_module, namespace, _, _) in list(_MODULES.items()):
        if name == "torch" or name.startswith("torch."):
            _index_builtins(namespace.values())
    _index_builtins(vars(_C.TensorBase).values())
    for preset in PRESETS:
        for spec in expand([preset]):
            _CATALOGUE.setdefault(spec, _Part(spec))
    for name in list(_MODULES):
        if name.startswith("course_lib."):
            _CATALOGUE.setdefault(name, _Part(name))


def _index_builtins(values: Any) -> None:
    """Torch's C functions (``torch._scaled_dot_product_attention_math``, ``Tensor.softmax``)
    under the ATen name they carry, so that an ``aten::`` glob names them by what they are."""
    for value in list(values):
        if type(value) in _C_CALLABLES:
            name = getattr(value, "__name__", None)
            if isinstance(name, str) and name.isidentifier():
                entries = _BUILTINS.setdefault(f"aten::{name}", [])
                if not any(value is e for e in entries):
                    entries.append(value)


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
#
# Threat: student code runs in this interpreter and can walk from any object it can reach to
# whatever that object references (a function's ``__globals__``, ``__closure__``,
# ``__defaults__``, a bound method's ``__self__``); ``gc`` and frames are refused by the audit
# hook, those attributes are not. So nothing student code can reach holds state that decides a
# verdict:
#
# - the hooks student code can reach (the module pre-hook in torch's global dict, the two torch
#   modes on torch's stacks, the profile function) are *sealed*: functions with no globals (an
#   empty namespace), no closure, and everything they use in their positional defaults (a tuple:
#   replacing it is audited and refused); the tables they read are frozensets and tuples;
# - which detector is on is the profile function itself (``sys.setprofile`` is refused to
#   student code): the modes and the pre-hook read its tables from it;
# - a forbidden call advances ``_COUNT`` (an ``itertools.count``: it can be advanced, never
#   reset) before its message is appended to ``_RECORDS``; the worker compares the count before
#   and after each call, so clearing the messages only turns them into a tampering verdict.
# ---------------------------------------------------------------------------------------------

_COUNT = itertools.count()
_CHECKED: set = set()  # code objects checked by _seal
_RECORDS: collections.deque = collections.deque(maxlen=64)
# The namespace of a sealed function: its code reads no name from it (checked by _seal); C code it
# calls may import (torch does), through the builtins everyone shares.
_EMPTY: dict = {"__builtins__": _builtins_module.__dict__}
_OPS = torch._ops
_OP_CALLS = (_OPS.OpOverloadPacket.__call__.__code__, _OPS.OpOverload.__call__.__code__)


def _glob(name: str, pattern: str, _len: Any = len) -> bool:
    """fnmatch's ``*`` and ``?`` (the aten specs' language), iterative, with no library code
    and no globals (sealed below: the hooks call it)."""
    n = p = 0
    star, mark = -1, 0
    size, length = _len(name), _len(pattern)
    while n < size:
        if p < length and pattern[p] == "*":
            star, mark = p, n
            p += 1
        elif p < length and (pattern[p] == "?" or pattern[p] == name[n]):
            n += 1
            p += 1
        elif star != -1:
            p = star + 1
            mark += 1
            n = mark
        else:
            return False
    while p < length and pattern[p] == "*":
        p += 1
    return p == length


def _lookup(pairs: tuple, key: Any) -> Any:
    """The spec paired with ``key`` (a linear scan: only on a hit)."""
    for k, spec in pairs:
        if k == key:
            return spec
    return None


import dis as _dis  # noqa: E402 (opcode numbers only, read now)

_CACHE_OPS = frozenset(
    _dis.opmap[n] for n in ("CACHE", "EXTENDED_ARG", "PUSH_NULL") if n in _dis.opmap
)
_JUMP_OPS = frozenset((*_dis.hasjrel, *_dis.hasjabs))
_LOAD_METHOD = _dis.opmap.get("LOAD_METHOD", -1)
_LOAD_ATTR = _dis.opmap["LOAD_ATTR"]
_LOAD_GLOBAL = _dis.opmap["LOAD_GLOBAL"]  # its low bit: whether a NULL is pushed (the same)


def _fingerprint(code: Any, _code_type: Any = types.CodeType, _type: Any = type,
                 _tuple: Any = tuple, _len: Any = len, _skip: Any = _CACHE_OPS,
                 _jumps: Any = _JUMP_OPS, _method: int = _LOAD_METHOD,
                 _attr: int = _LOAD_ATTR, _global: int = _LOAD_GLOBAL) -> tuple:  # fmt: skip
    """What a function's code *is*, whatever file name, line or name it was compiled under:
    its instructions (jump targets, caches and the compiler's line-dependent choice between
    ``LOAD_METHOD`` and ``LOAD_ATTR`` left out), names, variables, arguments and constants,
    nested code included. Read from the bytes, with no library code."""
    parts = []
    todo = [code]
    while todo:
        c = todo.pop()
        consts = []
        for k in c.co_consts:
            if _type(k) is _code_type:
                todo.append(k)
                consts.append("<code>")
            else:
                consts.append(k)
        raw, ops, i = c.co_code, [], 0
        size = _len(raw)
        while i + 1 < size:
            op, arg = raw[i], raw[i + 1]
            i += 2
            if op in _skip:
                continue
            if op in _jumps:
                arg = 0
            elif op == _method:
                op = _attr
            elif op == _global:
                arg = arg - arg % 2
            ops.append(op * 256 + arg)
        parts.append((_tuple(ops), c.co_names, c.co_varnames, c.co_argcount,
                      c.co_posonlyargcount, c.co_kwonlyargcount, _tuple(consts)))  # fmt: skip
    return _tuple(parts)


def _qualname(func: Any, _getattr: Any = getattr, _type: Any = type, _str: Any = str,
              _repr: Any = repr) -> str:  # fmt: skip
    module = _getattr(func, "__module__", None)
    name = _getattr(func, "__qualname__", None) or _getattr(func, "__name__", None)
    if _type(name) is not _str:
        name = _repr(func)
    if _type(module) is _str and module.startswith("torch._C"):
        module = "torch"
    return f"{module}.{name}" if _type(module) is _str and module else name


def _code_name(code: Any, _files: Any = _FILES, _getattr: Any = getattr) -> str:
    filename = code.co_filename
    module = _files.get(filename)
    if module is None:
        module = filename.rsplit("/", 1)[-1]
        module = module[:-3] if module.endswith(".py") else module
        module = module or filename
    return f"{module}.{_getattr(code, 'co_qualname', code.co_name)}"


def _note(what: str, spec: str, _count: Any = _COUNT, _next: Any = next,
          _append: Any = _RECORDS.append) -> None:  # fmt: skip
    _next(_count)  # first: a record removed later still leaves the count advanced
    _append(what if what == spec else f"{what} (forbidden by {spec!r})")


_READS_NAMES = frozenset(("LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL",
                         "LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_CLOSURE"))  # fmt: skip


def _seal(func: Any, defaults: tuple | None = None) -> Any:
    """``func``'s code with no globals and no closure; ``defaults`` replace its own."""
    if func.__code__ not in _CHECKED:  # once per code object: reads no name but its own
        import dis

        todo = [func.__code__]
        while todo:
            code = todo.pop()
            todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
            used = {i.argval for i in dis.get_instructions(code) if i.opname in _READS_NAMES}
            if used:
                raise TypeError(f"{func.__name__} cannot be sealed: it reads {sorted(used)}")
        _CHECKED.add(func.__code__)
    return _FUNCTION_TYPE(
        func.__code__, _EMPTY, func.__name__, func.__defaults__ if defaults is None else defaults
    )


_glob = _seal(_glob)
_lookup = _seal(_lookup)
_fingerprint = _seal(_fingerprint)
_qualname = _seal(_qualname)
_code_name = _seal(_code_name)
_note = _seal(_note)

# The tables a detector's hooks read: one tuple, positions below.
(T_CODES, T_CODE_SPECS, T_PREFIXES, T_FILES, T_IDS, T_ID_SPECS, T_NAMES, T_NAME_SPECS, T_ATEN,
 T_CLASSES, T_BYTECODES, T_PRINTS, T_ANY) = range(13)  # fmt: skip
MIN_FINGERPRINTED = 200  # bytes of bytecode: shorter functions are matched by identity only


def _profiler(frame: Any, event: str, arg: Any, _t: tuple = (), _note: Any = _note,
              _lookup: Any = _lookup, _qualname: Any = _qualname, _code_name: Any = _code_name,
              _fingerprint: Any = _fingerprint, _glob: Any = _glob, _calls: tuple = _OP_CALLS,
              _id: Any = id, _type: Any = type, _getattr: Any = getattr, _str: Any = str,
              _unwatchable: tuple = (), _mode_stack: tuple = (), _library: tuple = (),
              _tampered: str = TAMPERED_STACKS) -> None:  # fmt: skip
    if event == "call":
        code = frame.f_code
        spec = name = None
        if code in _t[0]:
            spec = _lookup(_t[1], code)
        elif _t[2] and code.co_filename.startswith(_t[2]):
            for prefix, value in _t[3]:
                if code.co_filename.startswith(prefix):
                    spec = value
                    break
        elif code is _calls[0] or code is _calls[1]:  # torch.ops.aten.X(...): by schema name
            op = frame.f_locals.get("self")
            name = _getattr(op, "_qualified_op_name", None) if code is _calls[0] else None
            if name is None:
                name = _getattr(_getattr(op, "_schema", None), "name", None)
            if _type(name) is _str:
                for pattern in _t[8]:
                    if _glob(name, pattern):
                        _note(name, pattern)
                        return
            return
        elif _t[10] and code.co_names in _t[10]:  # a forbidden function's code, recompiled
            spec = _lookup(_t[11], _fingerprint(code))
        if spec is not None:
            _note(_code_name(code), spec)
    elif event == "c_call":  # a forbidden C function called from Python, modes or not
        key = _id(arg)
        if key in _t[4]:
            _note(_qualname(arg), _lookup(_t[5], key))
        elif _t[12] and key in _unwatchable[0]:
            _note(_lookup(_unwatchable[1], key), "torch.jit")
        elif key in _mode_stack[0] and not frame.f_code.co_filename.startswith(_library):
            _note(f"{_tampered} ({_lookup(_mode_stack[1], key)})", "tampering")


def _tables(_getprofile: Any = _GETPROFILE, _getattr: Any = getattr) -> tuple | None:
    """The tables of the detector that is on: its profile function's (only trusted code can set
    one); None when none is."""
    defaults = _getattr(_getprofile(), "__defaults__", None)
    return defaults[0] if defaults else None


_tables = _seal(_tables)


def _function_mode(self: Any, func: Any, types: Any, args: tuple = (), kwargs: Any = None,
                   _tables: Any = _tables, _note: Any = _note, _lookup: Any = _lookup,
                   _qualname: Any = _qualname, _glob: Any = _glob, _id: Any = id,
                   _type: Any = type, _getattr: Any = getattr, _str: Any = str,
                   _python: Any = _FUNCTION_TYPE, _overload: Any = _OPS.OpOverload,
                   _packet: Any = _OPS.OpOverloadPacket) -> Any:  # fmt: skip
    t = _tables()
    if t is not None:
        key, kind = _id(func), _type(func)
        if key in t[4]:
            _note(_qualname(func), _lookup(t[5], key))
        elif kind is not _python:
            name = _getattr(func, "__name__", None)
            if name in t[6]:
                _note(_qualname(func), _lookup(t[7], name))
            if kind is _overload:  # an op by its schema name, decompositions included
                name = func._schema.name
            elif kind is _packet:
                name = func._qualified_op_name
            elif _type(name) is _str:
                name = "aten::" + name
            if _type(name) is _str:
                for pattern in t[8]:
                    if _glob(name, pattern):
                        _note(name, pattern)
                        break
    return func(*args, **(kwargs or {}))


def _dispatch_mode(self: Any, func: Any, types: Any, args: tuple = (), kwargs: Any = None,
                   _tables: Any = _tables, _note: Any = _note,
                   _glob: Any = _glob) -> Any:  # fmt: skip
    t = _tables()
    if t is not None:
        name = func._schema.name
        for pattern in t[8]:
            if _glob(name, pattern):
                _note(name, pattern)
    return func(*args, **(kwargs or {}))


def _pre_hook(module: Any, args: Any, _tables: Any = _tables, _note: Any = _note,
              _isinstance: Any = isinstance, _script: Any = _SCRIPT_MODULE) -> None:  # fmt: skip
    t = _tables()
    if t is None:
        return
    for cls, spec in t[9]:
        if _isinstance(module, cls):
            _note(f"{cls.__module__}.{cls.__qualname__}", spec)
    if t[12] and _isinstance(module, _script):
        _note("a TorchScript module (compiled code cannot be checked)", "torch.jit")


def _mode_init(self: Any, _deque: Any = collections.deque) -> None:
    self.old_dispatch_mode_flags = _deque()
    self.old_non_infra_dispatch_mode_flags = _deque()
    self.old_without_ignore_compile_internals_dispatch_mode_flags = _deque()


def _no_init(self: Any) -> None:
    pass


def _no_dynamo(cls: Any) -> bool:  # avoids a 6 s import of torch._dynamo
    return False


_profiler = _seal(
    _profiler,
    (*_profiler.__defaults__[:12],
     (frozenset(UNWATCHABLE), tuple(UNWATCHABLE.items())),
     (frozenset(MODE_STACK), tuple(MODE_STACK.items())),
     (), TAMPERED_STACKS),
)  # fmt: skip
_pre_hook = _seal(_pre_hook)


class _Functions(TorchFunctionMode):
    __init__ = _seal(_no_init)
    __torch_function__ = _seal(_function_mode)


class _Ops(TorchDispatchMode):
    __init__ = _seal(_mode_init)
    __torch_dispatch__ = _seal(_dispatch_mode)
    _should_skip_dynamo = classmethod(_seal(_no_dynamo))


_FUNCTION_MODE = _Functions()
_DISPATCH_MODE = _Ops()
# classes student code may not change (the audit hook refuses setattr / delattr on them, and
# assigning ``__class__`` on their instances)
PROTECTED: tuple = (_Functions, _Ops, TorchFunctionMode, TorchDispatchMode)


class Detector:
    """Context manager that records forbidden calls made while it is active. Its own state is
    held by the worker's server only; the hooks it installs are sealed (above)."""

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
            for key, value in part.functions.items():  # the first spec names it
                self.functions.setdefault(key, value)
            self.function_names.update(part.function_names)
            self.classes.extend(part.classes)
            self.codes.update(part.codes)
            self.files.update(part.files)
            self.keep.extend(part.keep)
        self.prefixes = tuple(self.files)
        self._hook: Any = None  # the sealed profile function (made when first entered)
        self._profile: Any = None
        self._hook_key: Any = None
        self._hooks: Any = None
        self._modes = (False, False)
        self._start = 0

    def _arm(self) -> Any:
        """The profile function holding this detector's tables (a new function: the worker
        calls this while the audit hook trusts it)."""
        prints = {}
        for code, spec in self.codes.items():
            if len(code.co_code) >= MIN_FINGERPRINTED:
                prints[_fingerprint(code)] = spec
        tables = (
            frozenset(self.codes), tuple(self.codes.items()), self.prefixes,
            tuple(self.files.items()), frozenset(self.functions), tuple(self.functions.items()),
            frozenset(self.function_names), tuple(self.function_names.items()),
            tuple(self.aten), tuple(self.classes),
            frozenset(p[0][1] for p in prints), tuple(prints.items()), self.any,
        )  # fmt: skip
        defaults = list(_profiler.__defaults__)
        defaults[0], defaults[14] = tables, _LIBRARY[0]
        return _seal(_profiler, tuple(defaults))

    def __enter__(self) -> Detector:
        """Only C functions and this module's own code run here (the worker calls it while the
        audit hook trusts it)."""
        self.violations = []
        self._stacks = mode_stacks()  # the call must leave them as they are
        if not self.any:
            return self
        if self._hook is None:
            self._hook = self._arm()
        self._modes = (True, bool(self.aten))
        _RECORDS.clear()
        self._start = next(_COUNT)
        _PUSH_FUNCTION_MODE(_FUNCTION_MODE)
        if self._modes[1]:
            _PUSH_DISPATCH_MODE(_DISPATCH_MODE)
        hooks = _DICT_GET(_MODULE_GLOBALS, "_global_forward_pre_hooks")
        if type(hooks) is dict or type(hooks) is collections.OrderedDict:
            self._hooks, self._hook_key = hooks, ("autograder", id(self))
            (_DICT_SETITEM if type(hooks) is dict else _ODICT_SETITEM)(
                hooks, self._hook_key, _pre_hook
            )
        self._profile = _GETPROFILE()
        _SETPROFILE(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.any:
            self._check_stacks()
            return
        _SETPROFILE(self._profile)
        calls = next(_COUNT) - self._start - 1  # forbidden calls (student code cannot rewind)
        if self._hooks is not None:
            pop = _DICT_POP if type(self._hooks) is dict else _ODICT_POP
            if pop(self._hooks, self._hook_key, None) is not _pre_hook:
                self._record("the forbidden-call detector's module hook was removed", "tampering")
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
        if calls > 0:
            records = [r for r in list(_RECORDS) if type(r) is str]
            for record in records:
                self._record(record, record)
            if not records:
                self._record(
                    f"{calls} forbidden call(s) whose records were erased (tampering)", "tampering"
                )
        _RECORDS.clear()
        if not intact:  # student code popped the detector's modes
            self._record("the forbidden-call detector's torch modes were removed", "tampering")
        else:
            self._check_stacks()

    def _record(self, what: str, spec: str) -> None:
        message = what if what == spec else f"{what} (forbidden by {spec!r})"
        if message not in self.violations:
            self.violations.append(message)

    def _check_stacks(self) -> None:
        if not same_stacks(self._stacks, mode_stacks()):  # a mode added, removed or swapped
            self._record(f"{TAMPERED_STACKS} (a mode added or removed)", "tampering")


PROTECTED += (Detector, _Part)
seal = _seal  # for the worker's objects that student code holds (its output capture)
