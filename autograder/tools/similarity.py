"""Similarity report: which graded cells look copied, from the references or from each other.

For every graded (solution) code cell of an assignment, each submission's code is compared with
the reference implementations (the same-named objects in ``course_lib``, the solution notebook's
cell, and optional past submissions) and with every other submission. It only flags: scores are
never touched.

The code goes through the grader's own intake (:func:`autograder.course.notebook.read_notebook`,
:func:`~autograder.course.notebook.extract`: imports, definitions and constants; nothing is run),
then an
AST normaliser that defeats the usual disguises:

- comments, docstrings, type annotations and string contents vanish; ``x += y`` is ``x = x + y``;
- local names (parameters, variables, helpers) become ``v``; imported aliases become their full
  dotted name (``F.softmax`` and ``torch.nn.functional.softmax`` agree);
- operands of commutative operators are put in a canonical order;
- independent statements are sorted by a canonical key (a topological order of the statements'
  read/write dependencies), so reordering them changes nothing;
- helper functions and helper methods the student added are inlined where they are called;
- the release's provided code (signatures, ``__init__`` bodies, ...) is subtracted statement by
  statement, and its fingerprints are removed: the base never counts.

The normalised token stream is fingerprinted with winnowing (Schleimer, Wilkerson and Aiken 2003:
hashes of k-token windows, the minimum of every w consecutive hashes kept) and two cells score
``|shared fingerprints| / min(|A|, |B|)``. Cells with fewer than ``min_tokens`` normalised tokens
of the student's own (a one-line ``return f(x)``) are too short to tell copying from the only way
to write them and are listed as such, never flagged.

Why not compare50 or copydetect (both evaluated on tests/fixtures/similarity with
``benchmarks/similarity.py --tools-python``: 41 copy pairs among 11 submissions and 2 references):

- compare50 1.2.15 (GPL-3.0, maintained) pins ``attrs<21``, which the course cannot install:
  jsonschema (nbformat, nbgrader, Jupyter Book) needs ``attrs>=22.2``; it also pulls lib50,
  cryptography, pexpect and an sdist-only termcolor 1.1. In a scratch venv its ``structure`` pass
  (pygments tokens, identifiers normalised, k=25 winnowing, raw counts of shared fingerprints)
  cannot separate the corpus: some copy pairs share 0 fingerprints while an independent pair
  shares 14.5; precision 0.65 at recall 0.80, or 0.78 at recall 0.68.
- copydetect 0.5.0 (MIT, last release 2024-03) installs with our pins, but it tokenises text
  (no reordering, no helper inlining, no base subtraction by structure): on the raw cells some
  copies score 0 and an independent pair 0.67 (precision 0.68 and recall 0.88 at its default
  0.33); with k=10, precision 0.82 at recall 0.90. Fed our normalised tokens it still does not
  separate them (weakest copy 0.77, strongest independent pair 0.78), and it matches on
  characters of its own filtered text, which loses the map back to the student's lines.
- Ours: every copy >= 0.667, every independent pair <= 0.471; at the threshold 0.6 precision and
  recall are 1.0. The fingerprinting is 30 lines; the normaliser is the part neither tool has.
"""

from __future__ import annotations

import ast
import builtins
import copy
import hashlib
import heapq
import html
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course.layout import PACKAGE_ROOT, Course
from autograder.course.notebook import (
    CodeChunk,
    NotebookError,
    assemble,
    cell_role,
    extract,
    oversized,
    read_notebook,
)
from autograder.host.intake import Submission, discover

K = 6  # tokens per k-gram
WINDOW = 3  # winnowing window (in k-grams)
THRESHOLD = 0.6
MIN_TOKENS = 40
MAX_INLINE_DEPTH = 3
MAX_REORDER = 150  # longer bodies keep their order (the dependency analysis is quadratic)
MAX_DETAILS = 40  # side-by-side views per cell (the table lists every pair)
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


# ---------------------------------------------------------------------------------------------
# Units: one side of a comparison (one graded cell of one submission or reference)
# ---------------------------------------------------------------------------------------------


@dataclass
class Block:
    label: str
    source: str


@dataclass
class Unit:
    owner: str
    kind: str  # "student", "reference" or "past"
    cell: str
    blocks: list[Block] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    tags: list[tuple[int, int]] = field(default_factory=list)  # (block, line) per token
    prints: dict[int, list[int]] = field(default_factory=dict)  # fingerprint -> token positions
    reason: str | None = None

    @property
    def comparable(self) -> bool:
        return self.reason is None


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
        self, stmts: list[ast.stmt], known: set[str] = frozenset(), aliases: dict | None = None
    ) -> list[ast.stmt]:
        """Canonical names and forms (in place), then independent statements sorted.
        ``known`` and ``aliases`` add the submission's own imports to the release's."""
        canon = _Canon(self.known | known, {**self.release.aliases, **(aliases or {})})
        return self.reorder([s for s in (canon.visit(s) for s in stmts) if s is not None])

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
    ) -> tuple[list[str], list[tuple[int, int]], int]:
        """Normalised tokens of one graded cell; also how many remain once the base is gone."""
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
        stmts = self.normalise(stmts, known, aliases)
        toks: list[str] = []
        tags: list[tuple[int, int]] = []
        self.tokens(stmts, toks, tags)
        return toks, tags, len(toks)


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


# ---------------------------------------------------------------------------------------------
# Fingerprints
# ---------------------------------------------------------------------------------------------


def fingerprints(tokens: list[str], k: int = K, window: int = WINDOW) -> dict[int, list[int]]:
    """Winnowed k-gram hashes -> the token positions where each k-gram starts."""
    if len(tokens) < k:
        grams = [" ".join(tokens)] if tokens else []
    else:
        grams = [" ".join(tokens[i : i + k]) for i in range(len(tokens) - k + 1)]
    hashes = [
        int.from_bytes(hashlib.blake2b(g.encode(), digest_size=8).digest(), "big") for g in grams
    ]
    if not hashes:
        return {}
    kept: set[int] = set()
    w = max(1, min(window, len(hashes)))
    for start in range(len(hashes) - w + 1):
        kept.add(min(hashes[start : start + w]))
    # every occurrence of a kept hash is a match position
    chosen: dict[int, list[int]] = {}
    for i, h in enumerate(hashes):
        if h in kept:
            chosen.setdefault(h, []).append(i)
    return chosen


def score(a: Unit, b: Unit) -> float:
    if not a.prints or not b.prints:
        return 0.0
    shared = a.prints.keys() & b.prints.keys()
    return len(shared) / min(len(a.prints), len(b.prints))


# ---------------------------------------------------------------------------------------------
# Building units from submissions and references
# ---------------------------------------------------------------------------------------------


_DEFINES = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", re.M)


def _needed(blocks: list[tuple[str, str]], graded: int | None, names: list[str]) -> set[int]:
    """The blocks worth parsing: the graded one, and those defining a name it (transitively)
    mentions or redefining a graded object (a cheap text test: parsing every cell is not)."""
    keep = {graded} if graded is not None else set()
    words = set(re.findall(r"\w+", blocks[graded][1])) if graded is not None else set()
    words |= set(names)
    changed = True
    while changed:
        changed = False
        for i, (_, source) in enumerate(blocks):
            if i not in keep and set(_DEFINES.findall(source)) & words:
                keep.add(i)
                words |= set(re.findall(r"\w+", source))
                changed = True
    return keep


def _index(label: str) -> int:
    m = re.match(r"cell (\d+)", label)
    return int(m.group(1)) if m else -1


def _student_code(path: Path, release_cells: list) -> tuple[dict[str, tuple], list[tuple]]:
    """({grade_id: (label, source)}, [(label, source)] of every solution cell).

    Exactly the student code that ``grade`` runs (:func:`autograder.course.notebook.assemble`): the
    solution cells, first copy of each ``grade_id``; added cells are not graded, so not compared.
    """
    read = read_notebook(path)
    chunks, _ = assemble(read.cells, release_cells)
    too_big = oversized(chunks)  # the limit grade applies (parsing costs memory)
    if too_big:
        raise NotebookError(too_big)
    by_index = {c.index: c for c in read.cells}
    graded: dict[str, tuple[str, str]] = {}
    solutions: list[tuple[str, str]] = []
    for chunk in chunks:
        cell = by_index.get(_index(chunk.label))
        if chunk.origin != "student" or cell is None:
            continue
        block = (chunk.label, chunk.source)
        graded.setdefault(cell.nbgrader.get("grade_id"), block)
        solutions.append(block)
    return graded, solutions


class Builder:
    def __init__(self, course: Course, assignment: str):
        self.course, self.assignment = course, assignment
        self.release = load_release(course, assignment)
        self.norm = Normaliser(self.release)
        self.release_nbs = course.release_notebooks(assignment)
        self._cache: dict[tuple, tuple] = {}
        self._base_stmts = {c.key: _parse(c.base) for c in self.release.cells}
        for cell in self.release.cells:
            toks: list[str] = []
            stmts = copy.deepcopy(self._base_stmts[cell.key])
            for s in ast.walk(ast.Module(body=stmts, type_ignores=[])):
                if isinstance(s, (ast.FunctionDef, ast.ClassDef)):
                    s._base = False  # type: ignore[attr-defined]
            stmts = [_Canon(self.norm.known, self.release.aliases).visit(s) for s in stmts]
            self.norm.tokens([s for s in stmts if s is not None], toks, [])
            self.release.base_tokens[cell.key] = set(fingerprints(toks))

    def _unit(
        self,
        owner: str,
        kind: str,
        cell: GradedCell,
        blocks: list[tuple[str, str]],
        graded_block: int | None,
    ) -> Unit:
        unit = Unit(owner, kind, cell.key, [Block(lbl, src) for lbl, src in blocks])
        if graded_block is None and not any(
            re.search(rf"^\s*(?:def|class)\s+{re.escape(n)}\b", src, flags=re.M)
            for _, src in blocks
            for n in cell.names
        ):
            unit.reason = "the solution cell is missing (deleted?)"
            return unit
        # identical code (an untouched cell, an exact copy) is normalised once
        cache_key = (cell.key, graded_block, tuple(src for _, src in blocks))
        done = self._cache.get(cache_key)
        if done is not None:
            unit.tokens, unit.tags, unit.prints, unit.reason = done
            return unit
        self._fill(unit, cell, blocks, graded_block)
        self._cache[cache_key] = (unit.tokens, unit.tags, unit.prints, unit.reason)
        return unit

    def _fill(
        self,
        unit: Unit,
        cell: GradedCell,
        blocks: list[tuple[str, str]],
        graded_block: int | None,
    ) -> None:
        helpers: dict[str, ast.FunctionDef] = {}
        graded_stmts: list[ast.stmt] = []
        # a graded object defined again in a later solution cell is the one the grader runs
        overrides: dict[str, ast.stmt] = {}
        start = _index(blocks[graded_block][0]) if graded_block is not None else -1
        for i in sorted(_needed(blocks, graded_block, cell.names)):
            label, source = blocks[i]
            ex, notes = extract(CodeChunk(label, source, "student"))
            if ex is None:
                if i == graded_block:
                    unit.reason = notes[0] if notes else "cannot be parsed"
                    return
                continue
            stmts = list(ex.tree.body)
            _tag(stmts, i)
            if i == graded_block:
                graded_stmts = stmts
            for s in stmts:
                if isinstance(s, ast.FunctionDef) and s.name not in cell.names:
                    helpers.setdefault(s.name, s)
                elif i != graded_block and getattr(s, "name", None) in cell.names:
                    if _index(blocks[i][0]) > start:
                        overrides[s.name] = s
        if overrides:
            graded_stmts = [
                s for s in graded_stmts if getattr(s, "name", None) not in overrides
            ] + list(overrides.values())
        try:
            toks, tags, _ = self.norm.unit_tokens(graded_stmts, _parse(cell.base), helpers)
        except Exception as error:  # noqa: BLE001 - one odd cell must not stop the report
            unit.reason = f"cannot be normalised ({type(error).__name__})"
            return
        unit.tokens, unit.tags = toks, tags
        base = self.release.base_tokens.get(cell.key, set())
        unit.prints = {h: p for h, p in fingerprints(toks).items() if h not in base}
        if not toks:
            unit.reason = "no code of their own (the release's code only)"
        elif len(toks) < MIN_TOKENS:
            unit.reason = f"too short to compare ({len(toks)} tokens of own code)"

    def submission(self, sub: Submission, kind: str = "student") -> dict[str, Unit]:
        units: dict[str, Unit] = {}
        for nb_name, path in sub.notebooks.items():
            cells = [c for c in self.release.cells if c.notebook == nb_name]
            reason = sub.error
            graded: dict[str, tuple] = {}
            extra: list[tuple] = []
            if reason is None and path is None:
                reason = f"missing: {nb_name} was not submitted"
            if reason is None:
                try:
                    graded, extra = _student_code(path, self.release_nbs[nb_name])
                except NotebookError as error:
                    reason = str(error)
            for cell in cells:
                if reason is not None:
                    units[cell.key] = Unit(sub.student, kind, cell.key, reason=reason)
                    continue
                mine = graded.get(cell.grade_id)
                blocks = ([mine] if mine else []) + [b for b in extra if b is not mine]
                units[cell.key] = self._unit(sub.student, kind, cell, blocks, 0 if mine else None)
        return units

    def references(self) -> dict[str, list[Unit]]:
        refs: dict[str, list[Unit]] = {c.key: [] for c in self.release.cells}
        # the solution notebook's cells
        for path in self.course.source_notebooks(self.assignment):
            if path.name not in self.release_nbs:
                continue
            sub = Submission("solution notebook", {path.name: path}, [path], path.parent)
            for key, unit in self.submission(sub, "reference").items():
                if unit.tokens:
                    refs[key].append(unit)
        # course_lib: same-named objects
        for cell in self.release.cells:
            found = library_sources(cell.names)
            for module, (blocks, helpers) in found.items():
                owner = f"course_lib ({module})"
                unit = Unit(owner, "reference", cell.key, [Block(module, b) for b in blocks])
                stmts: list[ast.stmt] = []
                for i, src in enumerate(blocks):
                    part = ast.parse(src).body
                    _tag(part, i)
                    stmts.extend(part)
                base = copy.deepcopy(self._base_stmts[cell.key])
                toks, tags, _ = self.norm.unit_tokens(stmts, base, helpers)
                unit.tokens, unit.tags = toks, tags
                base_prints = self.release.base_tokens.get(cell.key, set())
                unit.prints = {h: p for h, p in fingerprints(toks).items() if h not in base_prints}
                refs[cell.key].append(unit)
        return refs


_LIBRARY: dict[str, tuple[str, ast.Module]] = {}


def _library_modules() -> dict[str, tuple[str, ast.Module]]:
    if not _LIBRARY:
        root = PACKAGE_ROOT / "course_lib"
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(PACKAGE_ROOT)
            if "checks" in rel.parts:
                continue  # the checks, not implementations
            source = path.read_text(encoding="utf-8")
            try:
                _LIBRARY[".".join(rel.with_suffix("").parts)] = (source, ast.parse(source))
            except SyntaxError:
                continue
    return _LIBRARY


def library_sources(names: list[str]) -> dict[str, tuple[list[str], dict]]:
    """module -> (sources of the objects named ``names``, the module's functions as helpers).

    Read statically from the installed course_lib (what ``inspect.getsource`` would return),
    without importing torch."""
    found: dict[str, tuple[list[str], dict]] = {}
    for module, (source, tree) in _library_modules().items():
        blocks = []
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and stmt.name in names:
                blocks.append(ast.get_source_segment(source, stmt, padded=True) or "")
        if blocks:
            helpers = {
                s.name: s
                for s in tree.body
                if isinstance(s, ast.FunctionDef) and s.name not in names
            }
            found[module] = (blocks, helpers)
    return found


# ---------------------------------------------------------------------------------------------
# Comparing and reporting
# ---------------------------------------------------------------------------------------------


@dataclass
class Pair:
    cell: str
    a: Unit
    b: Unit
    score: float

    def lines(self) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
        """The (block, line) of either side that the shared fingerprints cover."""
        shared = self.a.prints.keys() & self.b.prints.keys()
        return _matched(self.a, shared), _matched(self.b, shared)


def _matched(unit: Unit, shared: set[int]) -> set[tuple[int, int]]:
    lines = set()
    for h in shared:
        for pos in unit.prints.get(h, []):
            for t in range(pos, min(pos + K, len(unit.tags))):
                lines.add(unit.tags[t])
    return lines


def scores(
    per_cell: dict[str, list[Unit]], references: dict[str, list[Unit]]
) -> list[tuple[str, Unit, Unit, float]]:
    """Every comparable pair of each cell: student with student, student with reference."""
    out = []
    for key, units in per_cell.items():
        live = [u for u in units if u.comparable]
        others = [u for u in references.get(key, []) if u.prints]
        for i, a in enumerate(live):
            for b in live[i + 1 :] + others:
                out.append((key, a, b, score(a, b)))
    return out


def by_cell(students: dict[str, dict[str, Unit]]) -> dict[str, list[Unit]]:
    per_cell: dict[str, list[Unit]] = {}
    for units in students.values():
        for key, unit in units.items():
            per_cell.setdefault(key, []).append(unit)
    return per_cell


def compare(
    students: dict[str, dict[str, Unit]],
    references: dict[str, list[Unit]],
    threshold: float = THRESHOLD,
) -> tuple[list[Pair], dict[str, list[Unit]]]:
    """Pairs above ``threshold`` (most similar first) and the per-cell units for the rows."""
    per_cell = by_cell(students)
    pairs = []
    for key, a, b, s in scores(per_cell, references):
        if s >= threshold:
            pairs.append(Pair(key, a, b, s))
    pairs.sort(key=lambda p: (-p.score, p.cell, p.a.owner, p.b.owner))
    return pairs, per_cell


def write_reports(
    out: Path,
    assignment: str,
    pairs: list[Pair],
    per_cell: dict[str, list[Unit]],
    threshold: float,
) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    md, page = (
        _markdown(assignment, pairs, per_cell, threshold),
        _html(assignment, pairs, per_cell, threshold),
    )
    (out / "similarity.md").write_text(md, encoding="utf-8")
    (out / "similarity.html").write_text(page, encoding="utf-8")
    data = [
        {
            "cell": p.cell,
            "a": p.a.owner,
            "b": p.b.owner,
            "kind": p.b.kind,
            "score": round(p.score, 3),
        }
        for p in pairs
    ]
    (out / "similarity.json").write_text(
        json.dumps({"threshold": threshold, "pairs": data}, indent=1)
    )
    return out / "similarity.md", out / "similarity.html"


def _side(unit: Unit, lines: set[tuple[int, int]]) -> list[tuple[str, list[tuple[int, str, bool]]]]:
    shown = []
    for i, block in enumerate(unit.blocks):
        rows = [(n, text, (i, n) in lines) for n, text in enumerate(block.source.split("\n"), 1)]
        if i == 0 or any(hit for _, _, hit in rows):
            shown.append((block.label, rows))
    return shown


def _md_code(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}python\n{text}\n{fence}"


def _markdown(assignment, pairs, per_cell, threshold) -> str:
    lines = [
        f"# Similarity: {assignment}",
        "",
        f"Pairs of graded cells with similarity >= {threshold:g} (shared fingerprints over the "
        "smaller side, after normalisation). This flags code to look at; it changes no score.",
        "",
    ]
    for key in per_cell:
        cell_pairs = [p for p in pairs if p.cell == key]
        lines += [f"## {key}", ""]
        if not cell_pairs:
            lines += ["No pair above the threshold.", ""]
        else:
            lines += ["| similarity | submission | similar to | kind |", "|---|---|---|---|"]
            for p in cell_pairs:
                lines.append(
                    f"| {p.score:.2f} | {_md(p.a.owner)} | {_md(p.b.owner)} | {p.b.kind} |"
                )
            lines.append("")
            for p in cell_pairs[:MAX_DETAILS]:
                lines += [f"### {p.score:.2f}: {_md(p.a.owner)} ~ {_md(p.b.owner)}", ""]
                for unit, matched in zip((p.a, p.b), p.lines()):
                    for label, rows in _side(unit, matched):
                        text = "\n".join(("> " if hit else "  ") + t for _, t, hit in rows)
                        lines += [f"{_md(unit.owner)}, {_md(label)} (matching lines marked >):", ""]
                        lines += [_md_code(text), ""]
        short, skipped = _not_compared(per_cell[key])
        if short or skipped:
            lines += ["Not compared:", ""]
            if short:
                names = ", ".join(_md(u.owner) for u in short)
                lines.append(f"- too short to tell copying from the only way to write it: {names}")
            lines += [f"- {_md(u.owner)}: {_md(u.reason)}" for u in skipped]
            lines.append("")
    return "\n".join(lines)


def _not_compared(units: list[Unit]) -> tuple[list[Unit], list[Unit]]:
    short = [u for u in units if u.reason and u.reason.startswith("too short")]
    return short, [u for u in units if u.reason and u not in short]


def _md(text: str) -> str:
    return re.sub(r"([\\`*_\[\]<>|#])", r"\\\1", str(text)).replace("\n", " ")


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px}
.pair{display:flex;gap:1em;margin-bottom:2em}.side{flex:1;min-width:0}
pre{background:#f7f7f7;padding:.5em;overflow-x:auto;font-size:13px}
.hit{background:#ffe08a;display:block}.skip{color:#777}"""


def _html(assignment, pairs, per_cell, threshold) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>Similarity: {e(assignment)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Similarity: {e(assignment)}</h1>",
        f"<p>Pairs of graded cells with similarity &ge; {threshold:g}; matching lines are "
        "highlighted. This flags code to look at; it changes no score.</p>",
    ]
    for key in per_cell:
        cell_pairs = [p for p in pairs if p.cell == key]
        parts.append(f"<h2>{e(key)}</h2>")
        if not cell_pairs:
            parts.append("<p>No pair above the threshold.</p>")
        else:
            parts.append("<table><tr><th>similarity</th><th>submission</th><th>similar to</th>"
                         "<th>kind</th></tr>")  # fmt: skip
            for p in cell_pairs:
                parts.append(
                    f"<tr><td>{p.score:.2f}</td><td>{e(p.a.owner)}</td><td>{e(p.b.owner)}</td>"
                    f"<td>{e(p.b.kind)}</td></tr>"
                )
            parts.append("</table>")
            for p in cell_pairs[:MAX_DETAILS]:
                parts.append(f"<h3>{p.score:.2f}: {e(p.a.owner)} ~ {e(p.b.owner)}</h3>")
                parts.append("<div class='pair'>")
                for unit, matched in zip((p.a, p.b), p.lines()):
                    parts.append(f"<div class='side'><b>{e(unit.owner)}</b>")
                    for label, rows in _side(unit, matched):
                        body = "".join(
                            f"<span class='hit'>{e(t) or ' '}</span>" if hit else e(t) + "\n"
                            for _, t, hit in rows
                        )
                        parts.append(f"<div>{e(label)}</div><pre>{body}</pre>")
                    parts.append("</div>")
                parts.append("</div>")
        short, skipped = _not_compared(per_cell[key])
        if short or skipped:
            parts.append("<p class='skip'>Not compared:</p><ul class='skip'>")
            if short:
                names = ", ".join(e(u.owner) for u in short)
                parts.append(
                    f"<li>too short to tell copying from the only way to write it: {names}</li>"
                )
            parts += [f"<li>{e(u.owner)}: {e(u.reason)}</li>" for u in skipped]
            parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def run(
    course: Course,
    assignment: str,
    submissions: list[Submission],
    out: Path,
    *,
    past: list[Path] = (),
    threshold: float = THRESHOLD,
    library: bool = True,
) -> list[Pair]:
    """Build the units, compare, write similarity.md/.html/.json into ``out``; return the pairs."""
    builder = Builder(course, assignment)
    release = list(builder.release_nbs)
    students = {s.student: builder.submission(s) for s in submissions}
    refs = builder.references() if library else {c.key: [] for c in builder.release.cells}
    for folder in past:
        for sub in discover(Path(folder), assignment, release):
            sub.student = f"past: {Path(folder).name}/{sub.student}"
            for key, unit in builder.submission(sub, "past").items():
                if unit.comparable:
                    refs.setdefault(key, []).append(unit)
    pairs, per_cell = compare(students, refs, threshold)
    write_reports(out, assignment, pairs, per_cell, threshold)
    return pairs


def report_safely(
    course: Course, assignment: str, submissions: list[Submission], out: Path
) -> None:
    """The similarity section of ``grade``'s report; a failure here never fails the grading."""
    try:
        start = time.perf_counter()
        pairs = run(course, assignment, submissions, out)
        print(
            f"similarity: {len(pairs)} pair(s) >= {THRESHOLD:g} in "
            f"{time.perf_counter() - start:.1f} s; similarity.md and similarity.html in {out}"
        )
    except Exception as error:  # noqa: BLE001 - a report, not a grade
        print(f"similarity report skipped: {type(error).__name__}: {error}", file=sys.stderr)


def main(args, course: Course) -> int:
    """``python -m autograder similarity``."""
    source = Path(args.submissions) if args.submissions else course.submitted_dir
    out = Path(args.out) if args.out else course.root / "autograder_out" / args.assignment
    release = list(course.release_notebooks(args.assignment))
    subs = discover(source, args.assignment, release)
    if not subs:
        print(f"no submissions found in {source}", file=sys.stderr)
    start = time.perf_counter()
    pairs = run(
        course, args.assignment, subs, out, past=[Path(p) for p in args.past or []],
        threshold=args.threshold,
    )  # fmt: skip
    for p in pairs:
        print(f"  {p.score:.2f}  {p.cell}  {p.a.owner} ~ {p.b.owner}")
    print(
        f"compared {len(subs)} submission(s) in {time.perf_counter() - start:.1f} s; "
        f"{len(pairs)} pair(s) >= {args.threshold:g}; similarity.md and similarity.html in {out}"
    )
    return 0
