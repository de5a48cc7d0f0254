"""Static scan of the code a submission will run, in the trusted process (no code is executed).

Two results: the names the code refers to, resolved through import aliases (``import
torch.nn.functional as F`` makes ``F.scaled_dot_product_attention`` read as
``torch.nn.functional.scaled_dot_product_attention``), which :func:`forbidden_hits` matches
against a test's forbidden calls; and *tampering*: reaching for the grader, the interpreter's
internals or monkeypatching a library (``torch.allclose = ...``), which fails every test.
"""

from __future__ import annotations

import ast
import fnmatch
from dataclasses import dataclass, field

from autograder.course.notebook import Extracted
from autograder.wire.forbid import expand, is_module_spec

# Reaching any of these (imported or referenced through an alias) is tampering.
TAMPER_MODULES = ("autograder", "pytest", "_pytest", "ctypes", "cffi")
TAMPER_NAMES = (
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "sys.modules",
    "sys._getframe",
    "sys.setprofile",
    "sys.settrace",
    "sys.addaudithook",
    "threading.setprofile",
    "threading.settrace",
    "inspect.currentframe",
    "inspect.stack",
    "inspect.getouterframes",
    "builtins",
    "torch.overrides",
    "torch.utils._python_dispatch",
    "torch._C._set_torch_function_mode",
    "torch._C._pop_torch_function_stack",
    "torch._C._push_on_torch_function_stack",
    "torch._C._unset_dispatch_mode",
    "torch._C._set_dispatch_mode",
    "torch._C._pop_torch_dispatch_stack",
    "torch._C.DisableTorchFunction",
    "torch._C.DisableTorchFunctionSubclass",
    "torch._C._DisableTorchDispatch",
    # raw file descriptors: the worker's channel to the grader is one
    "os.write",
    "os.writev",
    "os.pwrite",
    "os.sendfile",
    "os.dup",
    "os.dup2",
    "os.fdopen",
    "socket.fromfd",
    "socket.send_fds",
)
# Attributes that walk the interpreter's frames or rewrite functions, whatever the object.
TAMPER_ATTRIBUTES = {
    "f_back", "f_locals", "f_globals", "f_builtins", "tb_frame", "gi_frame", "cr_frame",
    "ag_frame", "__globals__", "__closure__", "__code__", "__subclasses__",
}  # fmt: skip
# Assigning to an attribute of these modules is monkeypatching (torch.backends.* is configuration).
PATCHABLE_ROOTS = (
    "torch", "numpy", "math", "course_lib", "autograder", "builtins", "sys", "pytest",
    "unittest", "operator", "functools", "inspect", "importlib", "types",
)  # fmt: skip
CONFIGURATION = ("torch.backends.",)
STRING_CALLS = {
    "getattr", "hasattr", "setattr", "delattr", "attrgetter", "methodcaller", "import_module",
    "__import__", "__getattribute__", "eval", "exec", "compile", "get",
}  # fmt: skip


@dataclass
class Reference:
    name: str  # fully qualified where an alias could be resolved, e.g. torch.nn.functional.x
    line: int
    label: str  # the cell, e.g. "cell 3 (attention)"
    kind: str  # "name", "import" or "string"

    def where(self) -> str:
        return f"{self.label}, line {self.line}"


@dataclass
class ScanResult:
    references: list[Reference] = field(default_factory=list)
    tampering: list[str] = field(default_factory=list)


def _dotted(node: ast.AST) -> tuple[str, ast.Name] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)]), node
    return None


def _aliases(trees: list[ast.Module]) -> tuple[dict[str, str], list[str]]:
    aliases: dict[str, str] = {}
    stars: list[str] = []
    for _ in range(2):  # a second pass resolves aliases of aliases defined later
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.asname:
                            aliases[a.asname] = a.name
                        else:
                            root = a.name.split(".")[0]
                            aliases[root] = root
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    for a in node.names:
                        if a.name == "*":
                            stars.append(node.module)
                        else:
                            aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target, value = node.targets[0], _dotted(node.value)
                    if isinstance(target, ast.Name) and value is not None:
                        dotted, root = value
                        if root.id in aliases and target.id != root.id:
                            rest = dotted[len(root.id) :]
                            aliases[target.id] = aliases[root.id] + rest
    return aliases, stars


def _assigned(targets: list[ast.AST]):
    """The attribute / subscript expressions assigned to (through tuples and starred)."""
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            yield from _assigned(target.elts)
        elif isinstance(target, ast.Starred):
            yield from _assigned([target.value])
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            yield target


def scan(extracted: list[Extracted]) -> ScanResult:
    result = ScanResult()
    trees = [e.tree for e in extracted]
    aliases, stars = _aliases(trees)
    defined = {
        n.name
        for t in trees
        for n in ast.walk(t)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }

    def qualify(node: ast.AST) -> str | None:
        found = _dotted(node)
        if found is None:
            return None
        dotted, root = found
        if root.id in aliases:
            return aliases[root.id] + dotted[len(root.id) :]
        return None

    for e in extracted:
        if e.origin != "student":
            continue  # provided read-only code is the release's, not the student's
        refs = result.references
        for node in ast.walk(e.tree):
            line = getattr(node, "lineno", 0)
            if isinstance(node, ast.Import):
                for a in node.names:
                    refs.append(Reference(a.name, line, e.label, "import"))
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    refs.append(Reference(f"{node.module}.{a.name}", line, e.label, "import"))
            elif isinstance(node, ast.Attribute):
                name = qualify(node)
                if name:
                    refs.append(Reference(name, line, e.label, "name"))
                if node.attr in TAMPER_ATTRIBUTES:
                    result.tampering.append(
                        f"{e.label}, line {line}: uses .{node.attr} (introspecting the "
                        "interpreter is not allowed)"
                    )
            elif isinstance(node, ast.Name):
                if node.id in aliases:
                    refs.append(Reference(aliases[node.id], line, e.label, "name"))
                elif stars and node.id not in defined and isinstance(node.ctx, ast.Load):
                    for module in stars:
                        refs.append(Reference(f"{module}.{node.id}", line, e.label, "name"))
                if node.id == "__builtins__":
                    result.tampering.append(f"{e.label}, line {line}: uses __builtins__")
            elif isinstance(node, ast.Call):
                called = _dotted(node.func)
                last = called[0].split(".")[-1] if called else ""
                if last in STRING_CALLS:
                    for arg in node.args + [k.value for k in node.keywords]:
                        for sub in ast.walk(arg):
                            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                                refs.append(Reference(sub.value, line, e.label, "string"))
                if last in ("setattr", "delattr") and node.args:
                    target = qualify(node.args[0])
                    if target and target.split(".")[0] in PATCHABLE_ROOTS:
                        result.tampering.append(
                            f"{e.label}, line {line}: {last}() on the module {target} "
                            "(monkeypatching a library is not allowed)"
                        )
            elif isinstance(node, ast.Subscript):
                base = _dotted(node.value)
                if base and base[0].split(".")[-1] in ("__dict__", "globals", "vars"):
                    for sub in ast.walk(node.slice):
                        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                            refs.append(Reference(sub.value, line, e.label, "string"))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name in ("__torch_function__", "__torch_dispatch__"):
                    result.tampering.append(
                        f"{e.label}, line {line}: defines {node.name} (intercepting torch "
                        "calls is not allowed)"
                    )
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = (
                    node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                )
                for sub in _assigned(targets):
                    base = sub if isinstance(sub, ast.Attribute) else sub.value
                    name = qualify(base)
                    root = name.split(".")[0] if name else ""
                    if root in PATCHABLE_ROOTS and not name.startswith(CONFIGURATION):
                        result.tampering.append(
                            f"{e.label}, line {line}: assigns to {name} (monkeypatching "
                            "a library is not allowed)"
                        )
        for ref in refs:
            if ref.kind == "string":
                continue
            root = ref.name.split(".")[0]
            if root in TAMPER_MODULES:
                result.tampering.append(f"{ref.where()}: uses {ref.name} (the grader's internals)")
            elif any(ref.name == t or ref.name.startswith(t + ".") for t in TAMPER_NAMES):
                result.tampering.append(f"{ref.where()}: uses {ref.name}")
        result.references = refs
    result.tampering = list(dict.fromkeys(result.tampering))
    return result


def forbidden_hits(result: ScanResult, names: list[str] | tuple[str, ...]) -> list[str]:
    """Messages for references to the forbidden ``names`` (presets or specs)."""
    hits: list[str] = []
    for spec in expand(list(names)):
        module_spec = not spec.startswith("aten::") and is_module_spec(spec)
        last = spec.split("::")[-1].split(".")[-1]
        for ref in result.references:
            if ref.kind == "string":
                core = last.strip("*")
                if module_spec:
                    matched = spec in ref.name
                else:
                    distinctive = len(core) >= 10 or "_" in core.strip("_")
                    matched = ref.name == core or (distinctive and core in ref.name)
            elif spec.startswith("aten::"):
                matched = ref.name.startswith("torch.ops.aten.") and fnmatch.fnmatchcase(
                    "aten::" + ref.name.split(".")[3], spec
                )
            elif ref.name == spec or ref.name.startswith(spec + "."):
                matched = True
            else:
                parts = ref.name.split(".")
                matched = (
                    not module_spec
                    and parts[0] == spec.split(".")[0]
                    and parts[-1] == last
                    and len(parts) > 1
                )
            if matched:
                shown = f"the string {ref.name!r}" if ref.kind == "string" else ref.name
                hits.append(f"{ref.where()}: uses {shown}, which this test forbids ({spec})")
    return list(dict.fromkeys(hits))
