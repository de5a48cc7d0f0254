"""What the worker's own interpreter refuses once student code can run in it.

The kernel-level containment (:mod:`.namespaces`, :mod:`.limits`) is the boundary where the
system permits it; this layer is what remains in fallback mode and a second line otherwise:

- an audit hook (cannot be removed once installed) refusing writes outside the work folder,
  reading hidden folders, changing directory out of it, starting processes, signals, ``ctypes``,
  ``sqlite3``, sockets without a network namespace, and reaching the interpreter's frames or
  objects (``gc`` walks, frame attributes, ``sys._getframe``, new code objects, trace and
  profile hooks): the ways to get at the forbidden-call detector;
- ``refuse_builtins``: threads, FIFOs / device nodes and ``_posixsubprocess.fork_exec`` (no audit
  events in 3.11) replaced by functions that refuse;
- ``seal_imports``: the grader's modules dropped from ``sys.modules`` and refused by a finder
  placed first on ``sys.meta_path``, so no name, string or ``importlib`` call reaches them;
- ``refuse_compilers``: TorchScript and custom-operator registration (code the detector cannot
  watch) refused; ``torch.jit.script`` and ``trace`` hand back the eager object unchanged.

Which code is the student's is decided by path, from an allow-list fixed before student code runs
(:func:`library_prefixes`): every frame whose file is not the interpreter's standard library, an
installed package, the course library or the worker's own is the student's, whatever name it was
compiled under. Code cannot be compiled, unmarshalled or renamed (``_imp._fix_co_filename``)
under an allow-listed file name unless it is that file's own code.
"""

from __future__ import annotations

import builtins as _builtins_module

__builtins__ = dict(_builtins_module.__dict__)  # private: student code may replace builtins.*

import errno  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {
    "os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown", "os.link",
    "os.symlink", "os.truncate", "os.utime", "os.chflags", "os.lchflags", "os.setxattr",
    "os.removexattr", "shutil.rmtree", "shutil.copyfile", "shutil.copytree", "shutil.move",
    "shutil.copymode", "shutil.copystat", "shutil.chown", "shutil.make_archive",
    "shutil.unpack_archive", "os.chdir",
}  # fmt: skip
_DENIED_EVENTS = {
    "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
    "os.startfile", "subprocess.Popen", "os.kill", "os.killpg", "pty.spawn", "os.add_dll_directory",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function",
    "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata",
    "ctypes.cdata/buffer", "sqlite3.connect", "sqlite3.connect/handle",
    "sqlite3.enable_load_extension", "sqlite3.load_extension", "os.fchdir", "mmap.__new__",
    "sys.remote_exec", "_thread.start_new_thread", "resource.setrlimit", "resource.prlimit",
}  # fmt: skip
# Reaching the interpreter's frames and objects: refused unless the worker's own code asks.
_INTROSPECTION = {
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
    "sys._current_exceptions", "sys.settrace", "sys.setprofile", "code.__new__",
    "function.__new__", "sys._getframemodulename",
}  # fmt: skip
_FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "gi_code"}
# Extension modules whose functions are replaced or policed: a fresh copy is not loaded again.
_NO_RELOAD = {
    "_posixsubprocess", "posix", "_thread", "_ctypes", "_sqlite3", "mmap", "_signal", "_imp",
}  # fmt: skip
SEALED_EVENT = "autograder.sealed_import"
CREATE_EVENT = "autograder.create_builtin"
RENAME_EVENT = "autograder.fix_co_filename"
# What makes a grader function behave as it does: never changed by student code.
_FUNCTION_STATE = ("__code__", "__defaults__", "__kwdefaults__")


def _fix_co_filename(code: Any, path: Any) -> None:
    """Stands in for ``_imp._fix_co_filename`` (importlib renames the code it loads): the check
    and the original live only in the audit hook, so no closure of this module holds them."""
    out: list = []
    sys.audit(RENAME_EVENT, code, path, out)
    if not out:
        raise PermissionError("renaming code is not allowed while grading")


def _create_builtin(spec: Any) -> Any:
    """Stands in for ``_imp.create_builtin``: the original lives only in the audit hook, so a
    fresh copy of ``_thread`` (whose functions were never replaced) cannot be made."""
    out: list = []
    sys.audit(CREATE_EVENT, spec, out)
    if not out:
        raise ImportError(f"cannot load the built-in module {getattr(spec, 'name', spec)!r}")
    return out[0]


_PROC_PRIVATE = ("environ", "mem", "maps", "auxv", "pagemap", "syscall", "stack", "cmdline")


class Trust:
    """Lets the worker's own code do what the hook refuses to student code (a counter kept in
    the hook's closure; the only reference is held by the worker's server)."""

    def __init__(
        self,
        enter: Callable[[], None],
        leave: Callable[[], None],
        labels: set[str],
        take: Callable[[], list[str]],
    ):
        self._enter, self._leave, self.take = enter, leave, take
        self.labels = labels  # file names of the student's code (filled in by the worker)

    def __enter__(self) -> None:
        self._enter()

    def __exit__(self, *exc: Any) -> None:
        self._leave()


def library_prefixes() -> tuple[str, ...]:
    """The folders whose files are library code: the standard library, the installed packages
    (the interpreter's and the environment's) and the course library; fixed when the worker
    starts, before any student code."""
    import sysconfig

    found: set[str] = set()
    for variables in (None, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        paths = sysconfig.get_paths(vars=variables) if variables else sysconfig.get_paths()
        found.update(paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    course_lib = sys.modules.get("course_lib")
    found.update(getattr(course_lib, "__path__", None) or ())
    out = {
        os.path.join(variant, "")
        for p in found
        for variant in (os.path.abspath(p), os.path.realpath(p))
    }
    return tuple(sorted(out))


def install_audit_hook(
    cwd: str,
    hidden: list[str],
    *,
    block_sockets: bool,
    writable: tuple[str, ...] = (),
    protected: tuple[Any, ...] = (),
) -> Trust:
    realpath, fspath, fsdecode, getcwd = os.path.realpath, os.fspath, os.fsdecode, os.getcwd
    join, isabs, isdir = os.path.join, os.path.isabs, os.path.isdir
    root = os.path.realpath(cwd)
    trusted = [0]
    labels: set[str] = set()
    getframe = sys._getframe
    import marshal
    import traceback
    import types
    from importlib import _bootstrap_external

    walk_stack_code = traceback.walk_stack.__code__
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # autograder/
    libraries = library_prefixes()
    roots = (root, *(os.path.realpath(w) for w in writable))
    code_type, str_type, bytes_type = types.CodeType, str, bytes
    unmarshal = marshal.loads
    compile_bytecode = _bootstrap_external._compile_bytecode.__code__
    get_code = _bootstrap_external.SourceLoader.get_code.__code__
    source_loader = _bootstrap_external.SourceFileLoader
    get_data = _bootstrap_external.FileLoader.get_data
    type_getattr = type.__getattribute__

    def inside(path: str) -> bool:
        return any(path == r or path.startswith(r + "/") for r in roots)

    def kind(name: Any) -> str:
        """ "grader", "library" or "student": decided by the allow-list, never by a label."""
        if type(name) is not str_type:
            return "student"
        if name.startswith(own):
            return "grader"
        if name.startswith("<frozen ") or (
            name.startswith(libraries) and not name.startswith(root + "/")  # the work folder
        ):
            return "library"
        return "student"

    def student_or_grader(frame: Any) -> bool:
        return kind(frame.f_code.co_filename) != "library"

    tampering: list[str] = []

    def caller() -> Any:
        """The frame whose code raised the audited event (hook <- C <- it)."""
        trusted[0] += 1
        try:
            frame = getframe(0)
        finally:
            trusted[0] -= 1
        while frame is not None and frame.f_code is not hook.__code__:
            frame = frame.f_back
        return frame.f_back if frame is not None else None

    def caller_is_student() -> bool:
        """Whether the code that raised the audited event is the student's."""
        frame = caller()
        return frame is not None and kind(frame.f_code.co_filename) == "student"

    def refuse(what: str, error: type[BaseException] = PermissionError) -> None:
        """Refuse; when the student's own code asked, it is tampering: the test fails."""
        if caller_is_student() and len(tampering) < 20:
            tampering.append(what)
        raise error(f"{what} is not allowed while grading")

    def frame_request(returned: Any) -> None:
        """sys._getframe: allowed to library code asking for library frames (torch formats
        stacks), never to student code, never returning a student's or the grader's frame."""
        frame = caller()  # hook <- (C) sys._getframe <- caller
        if frame is not None and kind(frame.f_code.co_filename) == "student":
            refuse("sys._getframe", ValueError)
        if frame is not None and frame.f_code is walk_stack_code:  # walk_stack(None) only
            raise ValueError("frame introspection is not allowed while grading")
        if frame is None or student_or_grader(frame) or student_or_grader(returned):
            raise ValueError("frame introspection is not allowed while grading")

    def genuine(source: Any, name: str) -> bool:
        """Whether ``source`` is the allow-listed file ``name``'s own text."""
        if type(source) not in (str_type, bytes_type):
            return False  # an AST or a buffer: never under a library's name
        trusted[0] += 1
        try:
            with open(name, "rb") as f:
                data = f.read()
        except OSError:
            return False
        finally:
            trusted[0] -= 1
        if type(source) is bytes_type:
            return source == data
        text = data.decode("utf-8", "replace")
        return source == text or source == text.replace("\r\n", "\n")

    def library_named_code(data: Any) -> bool:
        """Whether marshalled ``data`` holds code named after an allow-listed file."""
        trusted[0] += 1
        try:
            stack, seen = [unmarshal(data)], 0
        except Exception:
            return False
        finally:
            trusted[0] -= 1
        while stack and seen < 200_000:
            obj, seen = stack.pop(), seen + 1
            if type(obj) is code_type:
                if kind(obj.co_filename) != "student":
                    return True
                stack.extend(obj.co_consts)
            elif type(obj) in (tuple, list, set, frozenset):
                stack.extend(obj)
            elif type(obj) is dict:
                stack.extend(obj.items())
        return bool(stack)

    def bytecode_cache(frame: Any) -> bool:
        """Whether marshal.loads was asked by the import system for a library's cached
        bytecode (importlib's SourceFileLoader reading a .pyc under an allow-listed folder)."""
        if frame is None or frame.f_code is not compile_bytecode:
            return False
        outer = frame.f_back
        if outer is None or outer.f_code is not get_code:
            return False
        names = outer.f_locals
        loader, path = names.get("self"), names.get("bytecode_path")
        return (
            type(loader) is source_loader
            and type_getattr(source_loader, "get_data") is get_data
            and kind(path) == "library"
        )

    def unmarshal_request(data: Any) -> None:
        frame = caller()
        if frame is not None and kind(frame.f_code.co_filename) == "student":
            refuse("marshal.loads")
        if bytecode_cache(frame):
            return
        if library_named_code(data):
            raise PermissionError("unmarshalling code named after a library file is not allowed")

    def resolve(path: Any) -> str | None:
        if isinstance(path, int):
            return None
        try:
            text = fsdecode(fspath(path))
        except TypeError:
            return None
        return realpath(text if isabs(text) else join(getcwd(), text))  # the current folder

    def is_hidden(path: str) -> bool:
        if any(path == h or path.startswith(h + "/") for h in hidden):
            return True
        if path.startswith("/proc/"):  # another process's (or the original) environment
            parts = path.split("/")
            return len(parts) > 3 and parts[-1] in _PROC_PRIVATE
        return False

    import _imp

    create_builtin = _imp.create_builtin
    fix_co_filename = _imp._fix_co_filename
    if fix_co_filename is _fix_co_filename:  # a hook installed before holds the original
        fix_co_filename = None
    function_type = types.FunctionType
    handed = dict(_HANDED)  # from now on only this hook holds torch's originals
    _HANDED.clear()
    wrapper_codes = _WRAPPER_CODES
    path_types = (str, bytes, os.PathLike)

    def hand(name: str, args: tuple, kwargs: dict, out: list) -> None:
        """Call torch's original ``name`` for a wrapper: a zip file on a path is announced as an
        ``open`` (the rules of the hook apply: hidden folders, writes outside the work folder);
        the raw operator getters serve library code (``torch.ops``) only."""
        original = handed.get(name) if type(name) is str_type else None
        if original is None:
            raise PermissionError(f"{name!r} is not available while grading")
        if name in _RAW_OPS and not trusted[0]:
            frame = caller()
            if frame is not None and frame.f_code in wrapper_codes:
                frame = frame.f_back  # the wrapper's caller
            if frame is None or kind(frame.f_code.co_filename) == "student":
                if len(tampering) < 20:
                    tampering.append(f"torch._C.{name}")
                raise PermissionError(f"torch._C.{name} is not allowed while grading")
        elif args and isinstance(args[0], path_types):
            hook("open", (args[0], "wb" if name == "PyTorchFileWriter" else "rb", 0))
        out.append(original(*args, **kwargs))

    def rename(code: Any, path: Any) -> None:
        """``_imp._fix_co_filename``: never renames student code to an allow-listed file."""
        if type(code) is not code_type:
            raise TypeError("expected a code object")
        if kind(fsdecode(path) if type(path) in (str_type, bytes_type) else path) != "student":
            if kind(code.co_filename) == "student":
                refuse("renaming code after a library file")
        fix_co_filename(code, path)

    def grader_function(obj: Any) -> bool:
        return type(obj) is function_type and kind(obj.__code__.co_filename) == "grader"

    def hook(event: str, args: tuple) -> None:
        if event == HANDED_EVENT:  # (empty ``handed``: a hook installed before took them)
            if handed and len(args) == 4 and type(args[3]) is list and type(args[2]) is dict:
                hand(args[0], tuple(args[1]), args[2], args[3])
            return
        if event == RENAME_EVENT and fix_co_filename is not None:
            code, path, out = args
            rename(code, path)
            out.append(None)
            return
        if event == CREATE_EVENT:
            spec, out = args
            if getattr(spec, "name", None) in _NO_RELOAD and not trusted[0]:
                refuse(f"loading {spec.name} again", ImportError)
            out.append(create_builtin(spec))
            return
        if trusted[0]:
            return
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
            if not mode and isdir(path):  # a directory fd would give paths relative to it
                raise PermissionError(errno.EACCES, "opening a directory is not allowed", path)
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
        elif event == "import":
            if args and args[0] in _NO_RELOAD:
                raise ImportError(f"loading {args[0]} again is not allowed while grading")
        elif event == SEALED_EVENT:  # raised by the finder below: always an attempt on the grader
            if len(tampering) < 20:
                tampering.append(f"importing {args[0]}")
        elif event == "sys._getframe":
            frame_request(args[0] if args else None)
        elif event == "compile":
            name = args[1] if len(args) > 1 else None
            name = fsdecode(name) if type(name) in (str_type, bytes_type) else None
            if name is not None and kind(name) != "student" and not genuine(args[0], name):
                refuse(f"compiling code under the file name {name[:200]!r}")
        elif event == "marshal.loads":
            unmarshal_request(args[0] if args else None)
        elif event == "marshal.load":
            if caller_is_student():
                refuse("marshal.load")
        elif event in _INTROSPECTION:
            if event.startswith("sys._getframe"):  # what library code expects when none exists
                refuse(event, ValueError)
            refuse(event)
        elif event in ("object.__getattr__", "object.__setattr__", "object.__delattr__"):
            name = args[1] if len(args) > 1 else ""
            if event != "object.__getattr__" and (
                name == "__code__" or (name in _FUNCTION_STATE and grader_function(args[0]))
            ):
                refuse(f"{event} {name!r}")
            if name == "__class__" and event != "object.__getattr__":
                if any(type(args[0]) is p for p in protected):  # the detector's modes
                    refuse(f"changing the class of {type(args[0]).__name__}")
            if name in _FRAME_ATTRIBUTES and caller_is_student():  # library code (traceback
                refuse(f"{event} {name!r}")  # printing) may; what hands frames out is refused
            if event != "object.__getattr__" and any(args[0] is p for p in protected):
                refuse(f"changing {getattr(args[0], '__name__', 'the detector')}.{name}")
        elif block_sockets and event.startswith("socket."):
            raise PermissionError(errno.EPERM, "network access is not allowed while grading")

    def enter() -> None:
        trusted[0] += 1

    def take() -> list[str]:
        out = tampering[:]
        tampering.clear()
        return out

    def leave() -> None:
        trusted[0] -= 1

    sys.addaudithook(hook)
    _imp.create_builtin = _create_builtin
    _imp._fix_co_filename = _fix_co_filename
    return Trust(enter, leave, labels, take)


def _refuse(what: str, error: type[BaseException] = PermissionError) -> Callable:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise error(f"{what} is not allowed while grading")

    return refuse


def _at_fork_dropped(*, before: Any = None, after_in_child: Any = None,
                     after_in_parent: Any = None) -> None:  # fmt: skip
    """``os.register_at_fork`` in the worker: the same checks, no registration."""
    given = [f for f in (before, after_in_child, after_in_parent) if f is not None]
    if not given:
        raise TypeError("At least one argument is required.")
    if not all(callable(f) for f in given):
        raise TypeError("'before', 'after_in_child' and 'after_in_parent' must be callable")


def refuse_builtins() -> None:
    """Threads (the detector watches one thread), FIFOs, device nodes and raw process creation
    refused at the Python level (the kernel refuses threads and processes too where the worker
    has a uid of its own)."""
    import _posixsubprocess
    import _thread
    import posix
    import threading

    thread = _refuse("can't start new thread: starting a thread", RuntimeError)
    _thread.start_new_thread = _thread.start_new = thread
    threading._start_new_thread = thread
    for module in (os, posix):
        for name in ("mkfifo", "mknod", "fork", "forkpty"):
            if hasattr(module, name):
                setattr(module, name, _refuse(f"os.{name}"))
        if hasattr(module, "register_at_fork"):
            # accepted and dropped: nothing forks here (refused above, and by the kernel), so a
            # callback could never run; refusing it broke `import matplotlib` (its font cache
            # registers one) in every honest student's provided setup cell
            module.register_at_fork = _at_fork_dropped
    _posixsubprocess.fork_exec = _refuse("starting a process")
    for name in ("getprofile", "gettrace"):  # the detector's profile hook stays out of reach
        setattr(sys, name, lambda: None)
    threading.setprofile = threading.settrace = _refuse("threading.setprofile")
    import inspect
    import traceback

    import torch

    # one thread is all a worker may have: asking for more is accepted and ignored (the kernel
    # would refuse the threads, and OpenMP exits the process when it cannot start them)
    torch.set_num_threads = torch.set_num_interop_threads = lambda n: None

    for module, name in ((traceback, "walk_tb"), (inspect, "trace"), (inspect, "getinnerframes")):
        setattr(module, name, _refuse(f"{module.__name__}.{name}"))  # they hand out frames


class _Refused:
    """Stands in for an object whose every use is refused (TorchScript's compilation unit)."""

    def __init__(self, what: str):
        object.__setattr__(self, "_what", what)

    def __getattr__(self, name: str) -> Any:
        raise PermissionError(f"{self._what} is not allowed while grading")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError(f"{self._what} is not allowed while grading")


def refuse_compilers() -> None:
    """Code the forbidden-call detector cannot watch is refused: TorchScript (its interpreter
    runs no Python frame and no torch function mode) and custom operators (their kernels run
    below the detector's dispatch mode). ``torch.jit.script``, ``trace`` and ``trace_module``
    hand back the eager function or module unchanged, so code that scripts for speed still
    runs, watched; loading, defining and registering are refused."""
    import torch

    from autograder.sandbox.detector import COMPILERS

    for name in COMPILERS:
        if hasattr(torch._C, name):
            setattr(torch._C, name, _refuse(f"torch._C.{name} (TorchScript or custom operators)"))
    torch._C.CompilationUnit = _refuse("TorchScript compilation")

    def script(obj: Any, *args: Any, **kwargs: Any) -> Any:
        return obj

    def trace(func: Any, *args: Any, **kwargs: Any) -> Any:
        return func

    jit = torch.jit
    jit.script = jit._script.script = script
    jit.trace = jit._trace.trace = jit.trace_module = jit._trace.trace_module = trace
    jit.load = jit._serialization.load = _refuse("torch.jit.load")
    jit.CompilationUnit = _refuse("TorchScript compilation")
    jit._recursive.create_script_module = _refuse("TorchScript compilation")
    refused = _Refused("TorchScript compilation")
    for module in (jit._trace, jit._recursive):  # jit._state's stays: C++ reads it (optimizers)
        module._python_cu = refused


FILE_MAPPING = "torch's from_file (maps a file with no audit event; shared=True writes through)"
HANDED_EVENT = "autograder.handed"
# C entry points student code reaches only through the audit hook: put here in the zygote (before
# any student code), taken by install_audit_hook, whose hook then alone holds them. Nothing a
# student can walk to (a wrapper's globals, closure or defaults) holds an original.
_HANDED: dict[str, Any] = {}
_RAW_OPS = ("_jit_get_operation", "_get_operation_overload")  # raw operator callables by name


def _sealed(func: Any) -> Any:
    """``func`` with an empty namespace (only builtins, for C code) and no closure: its code
    reads no global (everything it uses is a constant or a default)."""
    import types

    out = types.FunctionType(
        func.__code__, {"__builtins__": _builtins_module.__dict__}, func.__name__,
        func.__defaults__,
    )  # fmt: skip
    out.__kwdefaults__ = func.__kwdefaults__
    out.__qualname__ = func.__qualname__
    return out


def _torch_file_writer(*args: Any, _audit: Any = sys.audit, **kwargs: Any) -> Any:
    out: list = []
    _audit("autograder.handed", "PyTorchFileWriter", args, kwargs, out)
    return out.pop()


def _torch_file_reader(*args: Any, _audit: Any = sys.audit, **kwargs: Any) -> Any:
    out: list = []
    _audit("autograder.handed", "PyTorchFileReader", args, kwargs, out)
    return out.pop()


def _jit_get_operation(*args: Any, _audit: Any = sys.audit, **kwargs: Any) -> Any:
    out: list = []
    _audit("autograder.handed", "_jit_get_operation", args, kwargs, out)
    return out.pop()


def _get_operation_overload(*args: Any, _audit: Any = sys.audit, **kwargs: Any) -> Any:
    out: list = []
    _audit("autograder.handed", "_get_operation_overload", args, kwargs, out)
    return out.pop()


_WRAPPERS = {
    "PyTorchFileWriter": _sealed(_torch_file_writer),
    "PyTorchFileReader": _sealed(_torch_file_reader),
    "_jit_get_operation": _sealed(_jit_get_operation),
    "_get_operation_overload": _sealed(_get_operation_overload),
}
_WRAPPER_CODES = frozenset(f.__code__ for f in _WRAPPERS.values())


def _set_in_type(cls: type, name: str, value: Any) -> None:
    """Set a class attribute even on an immutable (C) type, through the type's own dict (the
    zygote only, before any student code exists), and invalidate the attribute caches."""
    import ctypes
    import gc

    namespace = gc.get_referents(type.__dict__["__dict__"].__get__(cls))[0]
    namespace[name] = value
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))


def refuse_file_mapping() -> None:
    """Entry points that open files in C++ with no audit event (called in the zygote, before
    any student code): ``torch.from_file``, ``torch.ops.aten.from_file`` (its CPU kernel is
    overridden) and every storage's ``from_file`` are refused everywhere (in fallback mode the
    file system is not private, and a shared mapping writes through to the file);
    ``torch._C.PyTorchFileWriter`` / ``Reader`` on a path (``torch.save`` / ``torch.load``) first
    announce the path to the audit hook, so a checkpoint in the work folder still works."""
    import warnings

    import torch

    refusal = _refuse(FILE_MAPPING)
    seen = [torch.from_file]  # alive while ids are compared (no id reused meanwhile)
    originals = {id(torch.from_file): refusal}
    with warnings.catch_warnings():  # "overriding a previously registered kernel"
        warnings.simplefilter("ignore")
        library = torch.library.Library("aten", "IMPL")
        library.impl("from_file", refusal, "CPU")
    _immortal(library)  # the override lives as long as the worker; no name leads to it
    for cls in (*[v for v in vars(torch._C).values() if isinstance(v, type)],
                torch.UntypedStorage, torch.TypedStorage):  # fmt: skip
        if "from_file" in type.__dict__["__dict__"].__get__(cls):
            seen.append(cls.__dict__["from_file"])
            originals[id(seen[-1])] = refusal
            _set_in_type(cls, "from_file", refusal)
    for name in ("PyTorchFileWriter", "PyTorchFileReader", *_RAW_OPS):
        original = getattr(torch._C, name, None)
        if original is not None and original is not _WRAPPERS[name]:
            seen.append(original)
            _HANDED[name] = original  # for the audit hook only (taken by install_audit_hook)
            originals[id(original)] = _WRAPPERS[name]
    sys.addaudithook(_handing(_HANDED))  # the zygote's own torch.save (until a worker's hook)
    for module in list(sys.modules.values()):  # every alias: `from torch._C import ...`
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            if id(value) in originals:
                namespace[key] = originals[id(value)]
    seen.clear()


def _handing(handed: dict) -> Callable:
    """An audit hook that calls the originals for the wrappers with no check, while ``handed``
    holds them: in the zygote, and in a worker until install_audit_hook takes them (it empties
    ``handed``; from then on only the worker's hook, with its checks, holds them)."""

    def hook(event: str, args: tuple) -> None:
        if event == HANDED_EVENT and handed and len(args) == 4 and type(args[3]) is list:
            original = handed.get(args[0])
            if original is not None and type(args[2]) is dict:
                args[3].append(original(*args[1], **args[2]))

    return hook


def _immortal(obj: Any) -> None:
    """Keep ``obj`` alive for the life of the process with no reference anyone can follow (one
    reference count added in C; ``gc`` is refused to student code)."""
    import ctypes

    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def _find_spec(self: Any, name: Any, path: Any = None, target: Any = None,
               _audit: Any = sys.audit, _error: Any = ModuleNotFoundError) -> None:  # fmt: skip
    for p in self.prefixes:
        if name == p or name.startswith(p + "."):
            _audit("autograder.sealed_import", name)  # recorded by the hook, out of reach
            raise _error(f"No module named {name!r}", name=name)
    return None


def _finder_init(self: Any, prefixes: tuple[str, ...]) -> None:
    self.prefixes = prefixes


def _find_module(self: Any, name: Any, path: Any = None) -> None:
    self.find_spec(name, path)


class _Sealed:
    """A meta-path finder that refuses the grader's packages whatever the spelling. Its methods
    are sealed: ``type(sys.meta_path[0]).find_spec.__globals__`` is an empty namespace."""

    __init__ = _sealed(_finder_init)
    find_spec = _sealed(_find_spec)
    find_module = _sealed(_find_module)


SEALED = ("autograder", "pytest", "_pytest", "pluggy")


def seal_imports(prefixes: tuple[str, ...] = SEALED) -> None:
    """Drop ``prefixes`` from ``sys.modules`` and refuse to import them again. The worker's own
    code keeps working: it holds its module objects through its functions' globals."""
    for name in list(sys.modules):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            del sys.modules[name]
    sys.meta_path.insert(0, _Sealed(prefixes))
