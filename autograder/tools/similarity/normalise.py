"""The normaliser: one graded cell's code, as tokens that the usual disguises do not change.

Comments, docstrings, annotations and string contents vanish; ``x += y`` is ``x = x + y``; local
names become ``v`` and import aliases their dotted module path; commutative operands and
independent statements are put in a canonical order; helpers the student added are inlined where
they are called; dead code (prints, assignments nobody reads, branches behind a constant) is
removed; the release's provided statements are subtracted.

A second stream, the *shape* (``structural=True``), also forgets the vocabulary: every call is
spelt one way (``torch.softmax(x, dim=-1)``, ``F.softmax(x, -1)`` and ``x.softmax(-1)`` are all
``softmax(x, -1)``; ``@``, ``matmul``, ``mm`` and ``bmm`` are ``matmul``; ``x.size(i)`` is
``x.shape[i]``), lists are tuples and ``acc = []`` + ``for``/``append`` loops comprehensions. It
says what a function computes in which order, and survives a heavy disguise; it is compared with
the key and past submissions only (see :mod:`.weighting`).
"""

from __future__ import annotations

import ast
import builtins
import copy
import heapq
import re
from dataclasses import dataclass, field

from autograder.course.layout import Course
from autograder.course.notebook import CodeChunk, cell_role, extract

MAX_INLINE_DEPTH = 3
MAX_REORDER = 150  # longer bodies keep their order (the dependency analysis is quadratic)
BUILTINS = set(dir(builtins)) | {"self", "cls", "super"}
_TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|[A-Za-z_][\w.]*|\d[\w.]*|\*\*|//|->|[<>=!]=|\S")

# ---------------------------------------------------------------------------------------------
# What the release provides, per graded cell
# ---------------------------------------------------------------------------------------------


@dataclass
class GradedCell:
    notebook: str
    grade_id: str
    base: str  # the release's code of this cell (provided code: never counts)
    names: list[str]  # top-level functions and classes the cell defines

    @property
    def key(self) -> str:
        return f"{self.notebook}::{self.grade_id}"


@dataclass
class Release:
    cells: list[GradedCell]
    globals: set[str]  # top-level names the release defines or imports
    aliases: dict[str, str]  # import alias -> dotted module path
    methods: dict[str, set[str]]  # release class -> its methods
    base_tokens: dict[str, set[int]] = field(default_factory=dict)  # cell key -> fingerprints


def _parse(source: str, label: str = "release") -> list[ast.stmt]:
    ex, _ = extract(CodeChunk(label, source, "release"))
    return list(ex.tree.body) if ex is not None else []


def _defined(stmts: list[ast.stmt]) -> list[str]:
    return [
        s.name
        for s in stmts
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]


def _aliases(stmts: list[ast.stmt], into: dict[str, str]) -> None:
    for stmt in stmts:
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                if a.asname:
                    into[a.asname] = a.name
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            for a in stmt.names:
                if a.name != "*":
                    into[a.asname or a.name] = f"{stmt.module}.{a.name}"


def load_release(course: Course, assignment: str) -> Release:
    release = Release([], set(), {}, {})
    for name, cells in course.release_notebooks(assignment).items():
        for cell in cells:
            if cell.cell_type != "code":
                continue
            stmts = _parse(cell.source)
            _aliases(stmts, release.aliases)
            for stmt in stmts:
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    release.globals.update((a.asname or a.name).split(".")[0] for a in stmt.names)
                elif isinstance(stmt, ast.ClassDef):
                    release.methods[stmt.name] = set(_defined(stmt.body))
                elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    for node in (n for t in targets for n in ast.walk(t)):
                        if isinstance(node, ast.Name):
                            release.globals.add(node.id)
            release.globals.update(_defined(stmts))
            gid = cell.nbgrader.get("grade_id")
            if gid and cell_role(cell.nbgrader) == "solution" and _defined(stmts):
                release.cells.append(GradedCell(name, gid, cell.source, _defined(stmts)))
    return release


def _tag(stmts: list[ast.stmt], block: int, offset: int = 0) -> None:
    """Remember where each statement came from (statements only: expressions are not walked)."""
    todo = list(stmts)
    while todo:
        node = todo.pop()
        node._origin = (block, node.lineno + offset)  # type: ignore[attr-defined]
        for name in ("body", "orelse", "finalbody"):
            todo.extend(getattr(node, name, ()))
        for handler in getattr(node, "handlers", ()):
            todo.extend(handler.body)
        for case in getattr(node, "cases", ()):
            todo.extend(case.body)


def _strip_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            return body[1:]
    return body


def _key(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=False, include_attributes=False)


def _subtract(stmts: list[ast.stmt], base: list[ast.stmt]) -> list[ast.stmt]:
    """Remove the statements the release already provides (by structure, comments ignored)."""
    by_name = {
        s.name: s
        for s in base
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    pool: dict[str, int] = {}
    for s in base:
        if s.__class__.__name__ not in ("FunctionDef", "AsyncFunctionDef", "ClassDef"):
            k = _key(s)
            pool[k] = pool.get(k, 0) + 1
    out = []
    for stmt in stmts:
        ref = by_name.get(getattr(stmt, "name", None))
        if ref is not None and type(ref) is type(stmt):
            stmt.body = _subtract(_strip_docstring(stmt.body), _strip_docstring(ref.body))
            stmt._base = True  # type: ignore[attr-defined]  # header is provided
            out.append(stmt)
            continue
        k = _key(stmt) if pool else ""
        if pool.get(k):
            pool[k] -= 1
            continue
        out.append(stmt)
    return out


class _Inliner:
    """Inline calls to helper functions (``helper(x)``) and helper methods (``self.helper(x)``)."""

    def __init__(self, functions: dict[str, ast.FunctionDef], methods: dict[str, ast.FunctionDef]):
        self.functions, self.methods = functions, methods
        self.used: set[str] = set()

    def body(self, stmts: list[ast.stmt], depth: int = 0) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in stmts:
            for name in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, name, None)
                if isinstance(inner, list) and not isinstance(stmt, ast.ClassDef):
                    setattr(stmt, name, self.body(inner, depth))
            for handler in getattr(stmt, "handlers", []):
                handler.body = self.body(handler.body, depth)
            if isinstance(stmt, ast.ClassDef):
                stmt.body = self.body(stmt.body, depth)
            prelude: list[ast.stmt] = []
            stmt = self._calls(stmt, prelude, depth)
            out.extend(prelude)
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                out.append(stmt)
        return out

    def _target(self, func: ast.expr) -> tuple[ast.FunctionDef, bool] | None:
        if isinstance(func, ast.Name) and func.id in self.functions:
            return self.functions[func.id], False
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
            and func.attr in self.methods
        ):
            return self.methods[func.attr], True
        return None

    def _calls(self, stmt: ast.stmt, prelude: list[ast.stmt], depth: int) -> ast.stmt:
        inliner = self
        compound = ("body", "orelse", "finalbody", "handlers")

        class Visitor(ast.NodeTransformer):
            def visit_Call(self, node: ast.Call) -> ast.AST:
                self.generic_visit(node)
                found = inliner._target(node.func)
                if found is None or depth >= MAX_INLINE_DEPTH:
                    return node
                fn, method = found
                inliner.used.add(fn.name)
                params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
                if method and params:
                    params = params[1:]
                mapping: dict[str, ast.expr] = {}
                defaults = fn.args.defaults
                for p, d in zip(params[len(params) - len(defaults) :], defaults):
                    mapping[p] = d
                for p, d in zip([a.arg for a in fn.args.kwonlyargs], fn.args.kw_defaults):
                    if d is not None:
                        mapping[p] = d
                for p, a in zip(params, node.args):
                    mapping[p] = a
                for kw in node.keywords:
                    if kw.arg:
                        mapping[kw.arg] = kw.value
                body = copy.deepcopy(_strip_docstring(fn.body))
                # a non-trivial argument is bound as ``param = argument`` (as the call does)
                binds = []
                for p, a in list(mapping.items()):
                    if not isinstance(a, (ast.Name, ast.Constant, ast.Attribute)):
                        bind = ast.Assign([ast.Name(p, ast.Store())], a, lineno=0)
                        bind._origin = getattr(fn, "_origin", None)  # type: ignore[attr-defined]
                        binds.append(bind)
                        del mapping[p]
                body = binds + [_Substitute(mapping).visit(s) for s in body]
                body = inliner.body(body, depth + 1)
                if body and isinstance(body[-1], ast.Return):
                    prelude.extend(body[:-1])
                    return body[-1].value or ast.Constant(None)
                prelude.extend(body)
                return ast.Constant(None)

            def generic_visit(self, node: ast.AST) -> ast.AST:
                if node is not stmt and isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    return node
                return super().generic_visit(node)

        # only the statement's own expressions: nested bodies were handled by body()
        saved = {n: getattr(stmt, n) for n in compound if hasattr(stmt, n)}
        for n in saved:
            setattr(stmt, n, [])
        stmt = Visitor().visit(stmt)
        for n, v in saved.items():
            setattr(stmt, n, v)
        return stmt


class _Substitute(ast.NodeTransformer):
    def __init__(self, mapping: dict[str, ast.expr]):
        self.mapping = mapping

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and node.id in self.mapping:
            return copy.deepcopy(self.mapping[node.id])
        return node


class _Canon(ast.NodeTransformer):
    """Rename locals to ``v``, expand import aliases, drop annotations and string contents."""

    def __init__(self, known: set[str], aliases: dict[str, str]):
        self.known, self.aliases = known, aliases

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node._orig = node.id  # type: ignore[attr-defined]  # for the dependency analysis
        if node.id in self.aliases:
            node.id = self.aliases[node.id]
        elif node.id not in self.known:
            node.id = "v"
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg, node.annotation = "v", None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None
        node.body = _strip_docstring(node.body) or [ast.Pass()]
        if not getattr(node, "_base", False):
            node.name = "v"
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.body = _strip_docstring(node.body) or [ast.Pass()]
        if not getattr(node, "_base", False):
            node.name = "v"
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is None:
            return None
        new = ast.copy_location(ast.Assign([node.target], node.value), node)
        new._origin = getattr(node, "_origin", None)  # type: ignore[attr-defined]
        return self.visit(new)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        load = copy.deepcopy(node.target)
        for sub in ast.walk(load):
            if hasattr(sub, "ctx"):
                sub.ctx = ast.Load()
        new = ast.Assign([node.target], ast.BinOp(load, node.op, node.value))
        new = ast.copy_location(new, node)
        new._origin = getattr(node, "_origin", None)  # type: ignore[attr-defined]
        return self.visit(new)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, (str, bytes)):
            node.value = "s"
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return ast.copy_location(ast.Constant("s"), node)

    def visit_If(self, node: ast.If) -> ast.AST:
        if node.orelse and _negated(node.test) is not None:
            node.test, node.body, node.orelse = _negated(node.test), node.orelse, node.body
        self.generic_visit(node)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        if _negated(node.test) is not None:
            node.test, node.body, node.orelse = _negated(node.test), node.orelse, node.body
        self.generic_visit(node)
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, (ast.Add, ast.Mult, ast.BitAnd, ast.BitOr)):
            left, right = ast.unparse(node.left), ast.unparse(node.right)
            if right < left:
                node.left, node.right = node.right, node.left
        return node


_INVERSE = {ast.IsNot: ast.Is, ast.NotEq: ast.Eq, ast.NotIn: ast.In}


def _negated(test: ast.expr) -> ast.expr | None:
    """``a`` for ``not a``, ``a is b`` for ``a is not b`` (so both branch orders agree)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _INVERSE:
        return ast.Compare(test.left, [_INVERSE[type(test.ops[0])]()], test.comparators)
    return None


def _names(node: ast.AST) -> tuple[set[str], set[str]]:
    """(read, written) dotted names of a statement; ``x[]`` is a write to part of ``x``."""
    reads, writes = set(), set()
    skip: set[int] = set()
    for sub in ast.walk(node):
        if id(sub) in skip:
            continue
        if isinstance(sub, (ast.Attribute, ast.Subscript)) and isinstance(sub.ctx, ast.Store):
            if isinstance(sub, ast.Subscript):
                target, chain = _dotted(sub.value), sub.value
                while isinstance(chain, ast.Attribute):  # the written object is not read
                    skip.add(id(chain))
                    chain = chain.value
                skip.add(id(chain))
                if target:
                    writes.add(target + "[]")
            else:
                dotted = _dotted(sub)
                if dotted:
                    writes.add(dotted)
                    reads.add(dotted)
        elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Load):
            dotted = _dotted(sub)
            if dotted:
                reads.add(dotted)
        elif isinstance(sub, ast.Name):
            name = getattr(sub, "_orig", sub.id)
            (writes if isinstance(sub.ctx, (ast.Store, ast.Del)) else reads).add(name)
    return reads, writes


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([getattr(node, "_orig", node.id), *reversed(parts)])
    return None


_BARRIERS = (ast.Return, ast.Raise, ast.Break, ast.Continue, ast.Expr, ast.Delete, ast.Global,
             ast.Nonlocal, ast.Try, ast.With, ast.Assert, ast.Yield, ast.YieldFrom)  # fmt: skip


def _barrier(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    return any(isinstance(n, _BARRIERS) for n in ast.walk(stmt))


def _conflict(a: set[str], b: set[str]) -> bool:
    """Do the names overlap? Writes to parts of one object (``x[]``) commute with each other."""
    for x in a:
        for y in b:
            px, py = x.endswith("[]"), y.endswith("[]")
            if px and py:
                continue
            x0, y0 = x.removesuffix("[]"), y.removesuffix("[]")
            if x0 == y0 or x0.startswith(y0 + ".") or y0.startswith(x0 + "."):
                return True
    return False


class Normaliser:
    def __init__(self, release: Release):
        self.release = release
        self.known = BUILTINS | release.globals

    def normalise(
        self,
        stmts: list[ast.stmt],
        known: set[str] = frozenset(),
        aliases: dict | None = None,
        structural: bool = False,
    ) -> list[ast.stmt]:
        """Canonical names and forms (in place), then independent statements sorted.
        ``known`` and ``aliases`` add the submission's own imports to the release's."""
        canon = _Canon(self.known | known, {**self.release.aliases, **(aliases or {})})
        stmts = [s for s in (canon.visit(s) for s in stmts) if s is not None]
        if structural:
            stmts = [_Vocabulary().visit(s) for s in stmts]
        return self.reorder(stmts)

    def reorder(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        """Sort canonical statements by their text where their dependencies allow it."""
        for stmt in stmts:
            for name in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, name, None)
                if isinstance(inner, list):
                    setattr(stmt, name, self.reorder(inner))
        n = len(stmts)
        if n < 2 or n > MAX_REORDER:
            return stmts
        info = [(*_names(s), _barrier(s)) for s in stmts]
        deps: list[set[int]] = [set() for _ in range(n)]
        for j in range(n):
            rj, wj, bj = info[j]
            for i in range(j):
                ri, wi, bi = info[i]
                if bi or bj or _conflict(wi, rj | wj) or _conflict(ri, wj):
                    deps[j].add(i)
        keys = [ast.unparse(s) for s in stmts]
        waiting = [len(d) for d in deps]
        users: list[list[int]] = [[] for _ in range(n)]
        for j, d in enumerate(deps):
            for i in d:
                users[i].append(j)
        ready = [(keys[j], j) for j in range(n) if not waiting[j]]
        heapq.heapify(ready)
        order = []
        while ready:
            _, i = heapq.heappop(ready)
            order.append(stmts[i])
            for j in users[i]:
                waiting[j] -= 1
                if not waiting[j]:
                    heapq.heappush(ready, (keys[j], j))
        return order

    def tokens(self, stmts: list[ast.stmt], out: list[str], tags: list[tuple[int, int]]) -> None:
        for stmt in stmts:
            origin = getattr(stmt, "_origin", None) or (0, 0)
            if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass)):
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not getattr(stmt, "_base", False):
                    self._emit(_header(stmt), origin, out, tags)
                self.tokens(stmt.body, out, tags)
                continue
            if any(isinstance(getattr(stmt, n, None), list) for n in ("body", "orelse")):
                self._emit(_header(stmt), origin, out, tags)
                self.tokens(stmt.body, out, tags)
                for handler in getattr(stmt, "handlers", []):
                    self._emit(["except"], origin, out, tags)
                    self.tokens(handler.body, out, tags)
                for name in ("orelse", "finalbody"):
                    if getattr(stmt, name, None):
                        self._emit([name], origin, out, tags)
                        self.tokens(getattr(stmt, name), out, tags)
                continue
            self._emit(_TOKEN.findall(ast.unparse(stmt)), origin, out, tags)

    @staticmethod
    def _emit(toks: list[str], origin, out: list[str], tags: list) -> None:
        out.extend(toks)
        tags.extend([origin] * len(toks))

    def unit_tokens(
        self,
        stmts: list[ast.stmt],
        base: list[ast.stmt],
        helpers: dict[str, ast.FunctionDef],
        structural: bool = False,
    ) -> tuple[list[str], list[tuple[int, int]], int]:
        """Normalised tokens of one graded cell; also how many remain once the base is gone.
        ``structural``: the shape stream (the statements are changed: pass copies)."""
        graded = set(self.release.globals)
        # the student's own imports (anywhere in the cell) name modules, not local variables
        aliases: dict[str, str] = {}
        known: set[str] = set()
        imports = [
            n for s in stmts for n in ast.walk(s) if isinstance(n, (ast.Import, ast.ImportFrom))
        ]
        _aliases(imports, aliases)
        for node in imports:
            if isinstance(node, ast.Import):
                known.update(a.name.split(".")[0] for a in node.names if not a.asname)
        stmts = [s for s in stmts if not isinstance(s, (ast.Import, ast.ImportFrom))]
        stmts = _subtract(stmts, base)
        functions = {k: v for k, v in helpers.items() if k not in graded}
        methods = {}
        for stmt in stmts:
            if isinstance(stmt, ast.ClassDef):
                own = self.release.methods.get(stmt.name, set())
                for s in stmt.body:
                    if isinstance(s, ast.FunctionDef) and s.name not in own:
                        methods[s.name] = s
        if functions or methods:
            inliner = _Inliner(functions, methods)
            stmts = inliner.body(stmts)
            stmts = _drop_defs(stmts, inliner.used)
        stmts = drop_dead(stmts)
        if structural:
            stmts = _comprehensions(stmts)
            for s in ast.walk(ast.Module(body=stmts, type_ignores=[])):
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    s.body = _comprehensions(s.body)
        stmts = self.normalise(stmts, known, aliases, structural)
        toks: list[str] = []
        tags: list[tuple[int, int]] = []
        self.tokens(stmts, toks, tags)
        return toks, tags, len(toks)


# ---------------------------------------------------------------------------------------------
# Dead code: prints, assignments nobody reads, branches behind a constant
# ---------------------------------------------------------------------------------------------


def _constant_names(fn: ast.AST) -> dict[str, object]:
    """Local names bound exactly once, to a constant (``debug = False``)."""
    bound: dict[str, list] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.setdefault(node.id, []).append(node)
    out = {}
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and len(bound.get(node.targets[0].id, [])) == 1
        ):
            out[node.targets[0].id] = node.value.value
    return out


def _truth(test: ast.expr, constants: dict[str, object]) -> bool | None:
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, ast.Name) and test.id in constants:
        return bool(constants[test.id])
    return None


def _live(stmts: list[ast.stmt], constants: dict[str, object]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            if isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "print":
                continue
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Assert) and _truth(stmt.test, constants):
            continue
        if isinstance(stmt, ast.If) and _truth(stmt.test, constants) is not None:
            out.extend(_live(stmt.body if _truth(stmt.test, constants) else stmt.orelse,
                             constants))  # fmt: skip
            continue
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, name, None)
            if isinstance(inner, list) and inner and not isinstance(stmt, ast.ClassDef):
                setattr(stmt, name, _live(inner, constants) or [ast.Pass()])
        out.append(stmt)
    return out


def _unread(fn: ast.FunctionDef) -> None:
    """Remove ``name = value`` where nothing reads ``name`` (until nothing changes)."""
    while True:
        reads = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
                 and isinstance(n.ctx, ast.Load)}  # fmt: skip
        removed = False
        for node in ast.walk(fn):
            body = getattr(node, "body", None)
            if not isinstance(body, list) or isinstance(node, ast.ClassDef):
                continue
            keep = [
                s
                for s in body
                if not (
                    isinstance(s, ast.Assign)
                    and all(isinstance(t, ast.Name) and t.id not in reads for t in s.targets)
                )
            ]
            if len(keep) != len(body):
                node.body = keep or [ast.Pass()]
                removed = True
        if not removed:
            return


def drop_dead(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """Dead code out of every function (and method) of ``stmts``, in place."""
    for stmt in stmts:
        if isinstance(stmt, ast.ClassDef):
            drop_dead(stmt.body)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stmt.body = _live(stmt.body, _constant_names(stmt)) or [ast.Pass()]
            _unread(stmt)
            drop_dead([s for s in stmt.body if isinstance(s, ast.FunctionDef)])
    return stmts


# ---------------------------------------------------------------------------------------------
# The shape: one spelling per call, one container, comprehensions for append loops
# ---------------------------------------------------------------------------------------------

_MODULES = {"torch", "math", "numpy", "np", "F", "nn", "einops"}
_SAME = {"mm": "matmul", "bmm": "matmul", "int64": "long", "int32": "int", "multiply": "mul",
         "divide": "div", "subtract": "sub", "square": "pow", "rsqrt": "sqrt",
         "permute": "transpose", "reshape": "view", "amax": "max", "amin": "min"}  # fmt: skip
_COMPARE = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt",
            ast.GtE: "ge"}  # fmt: skip


def _call(name: str, args: list[ast.expr]) -> ast.Call:
    return ast.Call(ast.Name(_SAME.get(name, name), ast.Load()), args, [])


class _Vocabulary(ast.NodeTransformer):
    """After :class:`_Canon`: every call in one spelling (see the module's docstring)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        args = list(node.args) + [k.value for k in sorted(node.keywords, key=lambda k: k.arg or "")]
        func = node.func
        if isinstance(func, ast.Attribute):
            root = _dotted(func)
            if root is not None and root.split(".")[0] in _MODULES:
                node = _call(func.attr, args)
            elif not (isinstance(func.value, ast.Name) and func.value.id == "self"):
                node = _call(func.attr, [func.value, *args])
            else:
                node = ast.Call(func, args, [])
        elif isinstance(func, ast.Name):
            node = _call(func.id, args)
        else:
            node = ast.Call(func, args, [])
        if isinstance(node.func, ast.Name):
            if node.func.id == "where" and len(node.args) == 3:  # where(c, a, x): x.masked_fill
                c, a, x = node.args
                node = _call("masked_fill", [x, c, a])
            elif node.func.id == "size" and len(node.args) == 2:
                return ast.Subscript(ast.Attribute(node.args[0], "shape", ast.Load()),
                                     node.args[1], ast.Load())  # fmt: skip
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.MatMult):
            return _call("matmul", [node.left, node.right])
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, (ast.Invert, ast.Not)):
            return _call("logical_not", [node.operand])
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return _call(_COMPARE[type(node.ops[0])], [node.left, node.comparators[0]])
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        node.attr = _SAME.get(node.attr, node.attr)
        return node

    def visit_List(self, node: ast.List) -> ast.AST:
        self.generic_visit(node)
        return ast.Tuple(node.elts, node.ctx)

    def visit_ListComp(self, node: ast.ListComp) -> ast.AST:
        self.generic_visit(node)
        return ast.GeneratorExp(node.elt, node.generators)


def _comprehensions(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """``acc = []`` then ``for t in it: acc.append(e)`` -> ``acc = [e for t in it]``."""
    out: list[ast.stmt] = []
    for stmt in stmts:
        for name in ("body", "orelse"):
            inner = getattr(stmt, name, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(stmt, name, _comprehensions(inner))
        call = stmt.body[0].value if isinstance(stmt, ast.For) and len(stmt.body) == 1 and \
            isinstance(stmt.body[0], ast.Expr) else None  # fmt: skip
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "append"
            and len(call.args) == 1
            and out
            and isinstance(out[-1], ast.Assign)
            and isinstance(out[-1].value, (ast.List, ast.Tuple))
            and not out[-1].value.elts
            and ast.dump(out[-1].targets[0]).replace("Store", "Load") == ast.dump(call.func.value)
        ):
            gen = ast.comprehension(stmt.target, stmt.iter, [], 0)
            out[-1].value = ast.ListComp(call.args[0], [gen])
            continue
        out.append(stmt)
    return out


def _drop_defs(stmts: list[ast.stmt], used: set[str]) -> list[ast.stmt]:
    out = []
    for stmt in stmts:
        if (
            isinstance(stmt, ast.FunctionDef)
            and stmt.name in used
            and not getattr(stmt, "_base", False)
        ):
            continue
        if isinstance(stmt, ast.ClassDef):
            stmt.body = _drop_defs(stmt.body, used)
        out.append(stmt)
    return out


def _header(stmt: ast.stmt) -> list[str]:
    shallow = copy.copy(stmt)
    for name in ("body", "orelse", "finalbody", "handlers"):
        if hasattr(shallow, name):
            setattr(shallow, name, [ast.Pass()] if name == "body" else [])
    if isinstance(shallow, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        shallow.decorator_list = []
    if isinstance(shallow, ast.Try):
        shallow.handlers = [ast.ExceptHandler(None, None, [ast.Pass()])]
    text = ast.unparse(shallow).split("\n")[0]
    return _TOKEN.findall(text)
