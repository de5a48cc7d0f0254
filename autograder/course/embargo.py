"""The embargo: which ``course_lib`` objects are answer keys, and the student editions without them.

``course.yml`` at the course root is the schedule: each assignment is ``unreleased``, ``released``
or ``solutions-released``. What an assignment grades is derived from the assignment itself, never
listed by hand:

An assignment whose answer key lives beside its hidden suite (``autograder/suites/<name>/
<aN>_key.py``: it grades variants the book does not print, "reader-first") grades no
``course_lib`` object: it adds nothing to the embargo. For the others:

1. its *graded units*: every function or method of the source notebook's solution cells that holds a
   ``### BEGIN SOLUTION`` region, with the part it belongs to (the ``## 3. Title`` heading above
   it): ``EncoderBlock.forward`` in "A3, part 3 (The encoder block)";
2. the ``course_lib`` modules the assignment grades against: those its hidden suite
   (``autograder/suites/<name>/``) and its visible checks (``course_lib/checks/aN.py``) import;
3. each unit is matched by name to an object of those modules (``EncoderBlock.forward`` to
   ``course_lib.models.transformer.EncoderBlock.forward``; a function ``greedy_decode`` also to a
   method ``Transformer.greedy_decode`` when no function of that name exists).

``also: [dotted.name, ...]`` adds an object whose reference has another name; ``- dotted.name:
ViT.forward`` also says which graded unit it answers, so that it shows the same part (the
notebook's ``ViT.forward`` is ``course_lib.models.vit.VisionTransformer.forward``).

An object that a released notebook imports as provided code (``from course_lib.attention import
MultiHeadAttention`` in A3), or that such code may call, stays in the student edition: a note says
so (the student already runs it).

An object is *embargoed* when the assignment that grades it is not ``solutions-released``. The
student editions replace each embargoed object's body by its signature, docstring and a
``NotImplementedError`` that names the assignment and part (:func:`stub_source`); the book shows the
same stub in a box (``book/_ext/embargo_edition.py``); ``python -m autograder bundle``
writes the student bundle (``make student-bundle``).

The visible checks compare with the references. In the student wheel, an embargoed body is a call
of :func:`course_lib.checks.replay.replay`; when the wheel is built, :func:`record_checks` runs
every visible check on the reference answers (the solution notebook's definitions) with the
instructor's library and records each call of an embargoed object (a digest of its arguments, and
its output) into ``course_lib/checks/data/<assignment>.pt``: the checks get the expected outputs
and the outputs of the usual mistakes (a pre-norm block, unscaled embeddings) as data, and keep
their diagnoses; any other call raises ``NotImplementedError`` naming the part.

    python -m autograder embargo list         # the schedule, what is embargoed
    python -m autograder embargo wheel --out DIR   # the student wheel
    python -m autograder embargo bundle [--book DIR] [--out dist/student]
    python -m autograder embargo scan PATH...   # embargoed statements in files
"""

from __future__ import annotations

import ast
import contextlib
import html
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
STATES = ("unreleased", "released", "solutions-released")
SCHEDULE_FILE = "course.yml"
PART_HEADING = re.compile(r"^##\s+(\d+)\.\s+(.*?)\s*(\([^)]*points?\))?\s*$")


class ScheduleError(ValueError):
    """A mistake in ``course.yml``; the message names the file and line."""


@dataclass(frozen=True)
class Assignment:
    name: str  # a3_transformer
    state: str
    line: int  # 1-based line in course.yml
    also: tuple[tuple[str, int, str], ...] = ()  # (dotted name, line, unit it answers or "")

    @property
    def label(self) -> str:  # A3
        return self.name.split("_", 1)[0].upper()


@dataclass(frozen=True)
class Unit:
    """A graded function or method of an assignment's source notebook."""

    qualname: str  # EncoderBlock.forward
    part: int | None
    title: str

    def where(self, label: str) -> str:
        if self.part is None:
            return label
        return f"{label}, part {self.part} ({self.title})" if self.title else f"{label}, part"


@dataclass(frozen=True)
class Embargoed:
    module: str  # course_lib.models.transformer
    qualname: str  # EncoderBlock.forward
    assignment: str  # a3_transformer
    where: str  # A3, part 3 (The encoder block)

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.qualname}"


@dataclass
class Plan:
    """The schedule resolved against the course: what is embargoed, and the notes on it."""

    root: Path
    assignments: list[Assignment]
    embargoed: dict[str, Embargoed] = field(default_factory=dict)  # dotted -> object
    graded: dict[str, Embargoed] = field(default_factory=dict)  # every graded object
    notes: list[str] = field(default_factory=list)

    def released(self) -> list[Assignment]:
        return [a for a in self.assignments if a.state != "unreleased"]

    def by_module(self) -> dict[str, dict[str, str]]:
        """module -> {qualname: where} for the embargoed objects."""
        out: dict[str, dict[str, str]] = {}
        for item in self.embargoed.values():
            out.setdefault(item.module, {})[item.qualname] = item.where
        return out


# ------------------------------------------------------------------------------------------
# The schedule
# ------------------------------------------------------------------------------------------


def read_schedule(path: Path, known: list[str] | None = None) -> list[Assignment]:
    """Parse ``course.yml``: ``assignments: {name: state}`` or ``{name: {state:, also: [...]}}``."""
    import yaml

    text = path.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as error:
        raise ScheduleError(f"{path}: not valid YAML: {error}") from None

    def fail(node, message: str):
        raise ScheduleError(f"{path}:{node.start_mark.line + 1}: {message}")

    if not isinstance(root, yaml.MappingNode):
        raise ScheduleError(f"{path}:1: expected a mapping with the key 'assignments'")
    top = {k.value: (k, v) for k, v in root.value}
    for key, (knode, _) in top.items():
        if key != "assignments":
            fail(knode, f"unknown key {key!r} (expected 'assignments')")
    if "assignments" not in top:
        raise ScheduleError(f"{path}:1: no 'assignments' key")
    node = top["assignments"][1]
    if not isinstance(node, yaml.MappingNode):
        fail(node, "'assignments' should map each assignment to its state")
    out: list[Assignment] = []
    for knode, vnode in node.value:
        name = knode.value
        if known is not None and name not in known:
            fail(knode, f"unknown assignment {name!r} (known: {', '.join(known)})")
        if any(a.name == name for a in out):
            fail(knode, f"assignment {name!r} is listed twice")
        also: list[tuple[str, int, str]] = []
        if isinstance(vnode, yaml.ScalarNode):
            state, snode = vnode.value, vnode
        elif isinstance(vnode, yaml.MappingNode):
            fields = {k.value: (k, v) for k, v in vnode.value}
            for key, (fk, _) in fields.items():
                if key not in ("state", "also"):
                    fail(fk, f"unknown key {key!r} for {name} (expected 'state' or 'also')")
            if "state" not in fields:
                fail(vnode, f"{name} has no 'state'")
            snode = fields["state"][1]
            state = snode.value if isinstance(snode, yaml.ScalarNode) else None
            if "also" in fields:
                anode = fields["also"][1]
                if not isinstance(anode, yaml.SequenceNode):
                    fail(anode, f"'also' of {name} should be a list of dotted names")
                for item in anode.value:
                    line = item.start_mark.line + 1
                    if isinstance(item, yaml.ScalarNode):
                        also.append((item.value, line, ""))
                    elif (
                        isinstance(item, yaml.MappingNode)
                        and len(item.value) == 1
                        and all(isinstance(n, yaml.ScalarNode) for n in item.value[0])
                    ):
                        also.append((item.value[0][0].value, line, item.value[0][1].value))
                    else:
                        fail(item, "expected a dotted name (course_lib.layers.LayerNorm) or "
                                   "`dotted.name: Unit` (the graded unit it answers)")  # fmt: skip
        else:
            fail(vnode, f"the state of {name} should be one of {', '.join(STATES)}")
        if state not in STATES:
            fail(snode, f"unknown state {state!r} for {name} (expected one of {', '.join(STATES)})")
        out.append(Assignment(name, state, knode.start_mark.line + 1, tuple(also)))
    return out


# ------------------------------------------------------------------------------------------
# Deriving the graded objects
# ------------------------------------------------------------------------------------------


def _has_solution(lines: list[str], node: ast.AST) -> bool:
    return any("BEGIN SOLUTION" in line for line in lines[node.lineno - 1 : node.end_lineno])


def graded_units(root: Path, assignment: str) -> list[Unit]:
    """The functions and methods with a solution region in the source notebook, with their part."""
    units: list[Unit] = []
    for path in sorted((root / "solutions" / assignment).glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        part, title = None, ""
        for cell in notebook.get("cells", []):
            source = "".join(cell.get("source", ""))
            if cell.get("cell_type") == "markdown":
                for line in source.splitlines():
                    match = PART_HEADING.match(line)
                    if match:
                        part, title = int(match.group(1)), match.group(2).strip()
                continue
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.get("cell_type") != "code" or not meta.get("solution"):
                continue
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            lines = source.splitlines()
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    if _has_solution(lines, node):
                        units.append(Unit(node.name, part, title))
                elif isinstance(node, ast.ClassDef):
                    for item in node.body:
                        is_def = isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                        if is_def and _has_solution(lines, item):
                            units.append(Unit(f"{node.name}.{item.name}", part, title))
    return units


def _imported_modules(path: Path) -> set[str]:
    """``course_lib`` modules a Python file imports (anywhere in it)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, OSError):
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("course_lib"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("course_lib"):
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def library_index(root: Path) -> dict[str, set[str]]:
    """module -> qualnames of its top-level functions, classes and their methods."""
    index: dict[str, set[str]] = {}
    package = root / "course_lib"
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        module = ".".join(parts)
        if module.startswith("course_lib.checks"):
            continue
        names: set[str] = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        names.add(f"{node.name}.{item.name}")
        index[module] = names
    return index


def grading_modules(root: Path, assignment: str, index: dict[str, set[str]]) -> set[str]:
    """The library modules an assignment grades against (imported by its suite or its checks)."""
    files = sorted((root / "autograder" / "suites" / assignment).glob("*.py"))
    checks = root / "course_lib" / "checks" / f"{assignment.split('_', 1)[0]}.py"
    if checks.exists():
        files.append(checks)
    found: set[str] = set()
    for path in files:
        found |= _imported_modules(path)
    return {m for m in found if m in index and not m.startswith("course_lib.data")}


def _provided(root: Path, assignment: str, index: dict[str, set[str]]) -> dict[str, str]:
    """Library objects the released notebook imports as provided code -> how it gets them."""
    out: dict[str, str] = {}
    for path in sorted((root / "assignments" / assignment).glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        for cell in notebook.get("cells", []):
            if cell.get("cell_type") != "code":
                continue
            try:
                tree = ast.parse("".join(cell.get("source", "")))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module in index:
                    for alias in node.names:
                        out[f"{node.module}.{alias.name}"] = f"imported by {path.name}"
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "create"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                ):
                    family = _family_module(node.args[0].value)
                    if family:
                        out[family] = f'create("{node.args[0].value}") in {path.name}'
    return out


def _family_module(preset: str) -> str | None:
    try:
        from course_lib.models import family_of

        return family_of(preset).__name__
    except Exception:  # noqa: BLE001 (an unknown preset is the notebook's problem, not ours)
        return None


def _library_nodes(root: Path) -> dict[str, ast.AST]:
    """dotted name -> AST node, for every module, function, class and method of course_lib."""
    nodes: dict[str, ast.AST] = {}
    for path in sorted((root / "course_lib").rglob("*.py")):
        module = _module_name(root, path)
        if module.startswith("course_lib.checks"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes[module] = tree
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                nodes[f"{module}.{node.name}"] = node
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        nodes[f"{module}.{node.name}.{item.name}"] = item
    return nodes


def reachable(root: Path, provided: dict[str, str]) -> dict[str, str]:
    """Library objects that provided code may run -> why (an over-approximation by name).

    From each provided object (a module means all of it, a class all its methods), follow every
    name it mentions to the library's functions and classes of that name, and every attribute to
    the methods of that name in the same class.
    """
    nodes = _library_nodes(root)
    by_last: dict[str, list[str]] = {}
    for dotted, node in nodes.items():
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            by_last.setdefault(dotted.rsplit(".", 1)[1], []).append(dotted)
    why: dict[str, str] = {}
    work = []
    for dotted, how in provided.items():
        for name in nodes:
            if name == dotted or name.startswith(dotted + "."):
                if name not in why:
                    why[name] = how
                    work.append(name)
    while work:
        dotted = work.pop()
        node = nodes[dotted]
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        attrs = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
        found: set[str] = set()
        for name in names | attrs:
            for target in by_last.get(name, []):
                target_node = nodes[target]
                owner = target.rsplit(".", 1)[0]
                is_method = owner in nodes and isinstance(nodes[owner], ast.ClassDef)
                if not is_method or (name in attrs and dotted.startswith(owner + ".")):
                    found.add(target)
                if isinstance(target_node, ast.ClassDef):
                    found.update(n for n in nodes if n.startswith(target + "."))
        if isinstance(node, ast.ClassDef):
            found.update(n for n in nodes if n.startswith(dotted + "."))
        for target in found:
            if target not in why:
                why[target] = f"{why[dotted]}, through {dotted}"
                work.append(target)
    return why


def own_key(root: Path, assignment: str) -> Path | None:
    """The answer key beside the hidden suite (``autograder/suites/<name>/<aN>_key.py`` or
    ``key.py``), for an assignment that grades work the book does not print; else None."""
    suite = root / "autograder" / "suites" / assignment
    found = sorted(suite.glob("*key.py")) if suite.is_dir() else []
    return found[0] if found else None


def known_assignments(root: Path) -> list[str]:
    folder = root / "solutions"
    return sorted(p.name for p in folder.glob("a*_*") if p.is_dir()) if folder.is_dir() else []


def plan(root: Path = PACKAGE_ROOT, schedule: Path | None = None) -> Plan:
    """Resolve the schedule: every graded object, the embargoed ones, notes on what stays."""
    root = Path(root).resolve()
    schedule = schedule or root / SCHEDULE_FILE
    assignments = read_schedule(schedule, known_assignments(root))
    index = library_index(root)
    result = Plan(root, assignments)
    for a in assignments:
        modules = grading_modules(root, a.name, index)
        # reader-first (its key beside the suite): its units match no course_lib object
        for unit in [] if own_key(root, a.name) else graded_units(root, a.name):
            matches = [(m, unit.qualname) for m in sorted(modules) if unit.qualname in index[m]]
            if not matches and "." not in unit.qualname:
                matches = [
                    (m, q)
                    for m in sorted(modules)
                    for q in sorted(index[m])
                    if q.count(".") == 1 and q.endswith(f".{unit.qualname}")
                ]
            if not matches:  # a unique same-named object anywhere in the library
                anywhere = [(m, unit.qualname) for m in sorted(index) if unit.qualname in index[m]]
                matches = anywhere if len(anywhere) == 1 else []
            if not matches and unit.qualname not in {u for _, _, u in a.also}:
                result.notes.append(
                    f"{a.label}: {unit.qualname} has no reference of that name in "
                    f"{', '.join(sorted(modules)) or 'course_lib'} (list it under 'also' if any)"
                )
            for module, qualname in matches:
                item = Embargoed(module, qualname, a.name, unit.where(a.label))
                result.graded.setdefault(item.dotted, item)
        units = {u.qualname: u for u in graded_units(root, a.name)}
        for dotted, line, answers in a.also:
            module = next(
                (m for m in sorted(index, key=len, reverse=True) if dotted.startswith(m + ".")),
                None,
            )
            qualname = dotted[len(module) + 1 :] if module else ""
            if not module or qualname not in index[module]:
                raise ScheduleError(
                    f"{schedule}:{line}: unknown object {dotted!r} (not a function, class or "
                    f"method of course_lib)"
                )
            if answers and answers not in units:
                raise ScheduleError(
                    f"{schedule}:{line}: {a.name} grades no {answers!r} (its graded units: "
                    f"{', '.join(units)})"
                )
            where = units[answers].where(a.label) if answers else a.label
            item = Embargoed(module, qualname, a.name, where)
            result.graded.setdefault(item.dotted, item)
    provided: dict[str, str] = {}
    for a in result.released():
        for dotted, how in _provided(root, a.name, index).items():
            provided.setdefault(dotted, f"{how} ({a.label})")
    states = {a.name: a.state for a in assignments}
    reached = reachable(root, provided)
    for dotted, item in sorted(result.graded.items()):
        if states[item.assignment] == "solutions-released":
            continue
        reason = reached.get(dotted)
        if reason:
            result.notes.append(f"{item.where}: {dotted} stays in the student edition: {reason}")
            continue
        result.embargoed[dotted] = item
    return result


# ------------------------------------------------------------------------------------------
# The stub transform (wheel and book)
# ------------------------------------------------------------------------------------------


def message(where: str) -> str:
    return f"You implement this in {where}."


def stub_source(
    source: str, targets: dict[str, str], *, body: str = "raise", module: str = ""
) -> str:
    """``source`` with each target's body replaced: signature and docstring stay.

    ``targets`` maps qualnames (``LayerNorm.forward``, ``causal_mask``) to where the student
    implements them. ``body="raise"`` writes ``raise NotImplementedError("...")``;
    ``body="replay"`` a call of :func:`course_lib.checks.replay.replay` (the check data, else
    that error); ``body="ellipsis"`` a comment and ``...`` (for display).
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (first line index, end line index, replacement)

    def visit(nodes: list[ast.stmt], prefix: str) -> None:
        for node in nodes:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            qualname = prefix + node.name
            if qualname not in targets:
                continue
            first = node.body[0]
            has_doc = (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            )
            keep_to = first.end_lineno if has_doc else first.lineno - 1  # 1-based, inclusive
            if first.lineno == node.lineno:  # `def f(): return x` on one line
                raise ValueError(f"{qualname}: a one-line body cannot be stubbed")
            indent = " " * (first.col_offset)
            text = message(targets[qualname])
            if body == "raise":
                new = f"{indent}raise NotImplementedError({text!r})\n"
            elif body == "replay":  # the check data answers the visible checks' own calls
                dotted, where = f"{module}.{qualname}", targets[qualname]
                new = (
                    f'{indent}return __import__("course_lib.checks.replay", fromlist=["replay"])'
                    f".replay({dotted!r}, {where!r}, locals())\n"
                )
            else:
                new = f"{indent}# {text}\n{indent}...\n"
            edits.append((keep_to, node.end_lineno, new))

    visit(tree.body, "")
    for start, end, new in sorted(edits, reverse=True):
        # lines[start:end] are the body statements after the docstring (0-based slice)
        tail = lines[end:]
        lines[start:] = [new, *tail]
    return "".join(lines)


def stub_package(
    src: Path, dest: Path, by_module: dict[str, dict[str, str]], body: str = "replay"
) -> list[str]:
    """Copy the package ``src`` (course_lib) to ``dest``, stubbing the embargoed objects."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    done: list[str] = []
    for module, targets in by_module.items():
        rel = Path(*module.split(".")[1:])
        path = dest / rel.with_suffix(".py")
        if not path.exists():
            path = dest / rel / "__init__.py"
        text = path.read_text(encoding="utf-8")
        path.write_text(stub_source(text, targets, body=body, module=module), encoding="utf-8")
        done += [f"{module}.{q}" for q in targets]
    return done


# ------------------------------------------------------------------------------------------
# Scanning: no embargoed statement in what students get
# ------------------------------------------------------------------------------------------

TOKEN = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d+)?|\*\*|//|[^\sA-Za-z_0-9]")
MIN_TOKENS = 8


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def _body_statements(source: str, qualname: str) -> list[str]:
    """Token strings of each line of the body (after the docstring) of ``qualname``."""
    tree = ast.parse(source)
    node: ast.AST | None = None
    scope: list[ast.stmt] = tree.body
    for part in qualname.split("."):
        node = next(
            (
                n
                for n in scope
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and n.name == part
            ),
            None,
        )
        if node is None:
            return []
        scope = node.body
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body:
        return []
    lines = source.splitlines()[body[0].lineno - 1 : node.end_lineno]
    out = []
    for line in lines:
        code = (
            line.split("#", 1)[0] if "#" in line and "'" not in line and '"' not in line else line
        )
        toks = tokens(code)
        if len(toks) >= MIN_TOKENS:
            out.append(" ".join(toks))
    return out


def secrets(p: Plan) -> dict[str, list[str]]:
    """dotted -> token strings of the embargoed body's statements that appear nowhere else.

    Also the statements of an answer key beside a hidden suite (``<name> key: RMSNorm.forward``),
    until the assignment's solutions are released. A statement that also appears in shipped (not
    embargoed) library code is not a secret.
    """
    found: dict[str, list[str]] = {}
    sources: dict[str, str] = {}
    for dotted, item in p.embargoed.items():
        path = _module_path(p.root, item.module)
        sources.setdefault(item.module, path.read_text(encoding="utf-8"))
        found[dotted] = _body_statements(sources[item.module], item.qualname)
    # reader-first assignments: the graded units' bodies in the key beside the hidden suite
    for a in p.assignments:
        key = own_key(p.root, a.name)
        if key is None or a.state == "solutions-released":
            continue
        source = key.read_text(encoding="utf-8")
        for unit in graded_units(p.root, a.name):
            found[f"{a.name} key: {unit.qualname}"] = _body_statements(source, unit.qualname)
    # the shipped code: the stubbed library, tokenised
    shipped = []
    for path in sorted((p.root / "course_lib").rglob("*.py")):
        module = _module_name(p.root, path)
        text = path.read_text(encoding="utf-8")
        targets = p.by_module().get(module)
        shipped.append(" ".join(tokens(stub_source(text, targets) if targets else text)))
    haystack = f" {' '.join(shipped)} "
    return {d: [s for s in ss if f" {s} " not in haystack] for d, ss in found.items()}


def _module_path(root: Path, module: str) -> Path:
    rel = Path(*module.split("."))
    path = root / rel.with_suffix(".py")
    return path if path.exists() else root / rel / "__init__.py"


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _text_of(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix in (".whl", ".zip"):
        texts = []
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                inner = archive.read(info)
                texts.append(inner.decode("utf-8", "replace"))
        return "\n".join(texts)
    text = data.decode("utf-8", "replace")
    if path.suffix in (".html", ".htm"):
        text = html.unescape(re.sub(r"<[^>]+>", "", text))
    return text


def scan(p: Plan, paths: list[Path]) -> list[str]:
    """Embargoed statements found in ``paths`` (files or folders): ``file: object: statement``."""
    table = secrets(p)
    hits: list[str] = []
    files = []
    for path in paths:
        files += sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
    for f in files:
        if f.suffix not in (".py", ".ipynb", ".html", ".htm", ".txt", ".md", ".whl", ".zip"):
            continue
        hay = f" {' '.join(tokens(_text_of(f)))} "
        for dotted, statements in table.items():
            hits += [f"{f}: {dotted}: {s}" for s in statements if f" {s} " in hay]
    return hits


# ------------------------------------------------------------------------------------------
# Building the student wheel and the bundle
# ------------------------------------------------------------------------------------------

INSTRUCTOR_ONLY = ("solutions", "autograder", "grading", ".git")


def _detached(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple | list):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


def _storable(value) -> bool:
    import torch

    if isinstance(value, torch.Tensor | int | float | bool | str | type(None)):
        return True
    if isinstance(value, tuple | list):
        return all(_storable(v) for v in value)
    if isinstance(value, dict):
        return all(_storable(k) and _storable(v) for k, v in value.items())
    return False


def _check_statements(cell_source: str, grade: bool) -> list[ast.stmt]:
    """What runs of a cell: a check cell's imports and ``check_*`` calls; else definitions."""
    from autograder.course.notebook import keep_statement

    try:
        tree = ast.parse(cell_source)
    except SyntaxError:
        return []
    if not grade:
        return [s for s in tree.body if keep_statement(s)]
    out = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("course_lib.checks"):
            out.append(stmt)
        elif (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id.startswith("check_")
        ):
            out.append(stmt)
    return out


def record_checks(p: Plan, assignment: str) -> tuple[dict, list[str]]:
    """Run the assignment's visible checks on the reference answers, recording embargoed calls.

    Returns the table (``{"exact": {key: {"output", "rng", "type"}}, "near": {...}}``, see
    :mod:`course_lib.checks.replay`) and notes (checks that failed, outputs not stored).
    """
    import importlib
    import inspect

    import torch

    from course_lib.checks import replay

    targets = [i for i in p.embargoed.values()]
    table: dict[str, dict] = {}
    close: dict[str, list[dict]] = {}  # near key -> [{"floats": [...], "key": exact key}]
    bad: set[str] = set()
    notes: list[str] = []
    saved: list[tuple[object, str, object]] = []

    def wrap(dotted: str, fn):
        signature = inspect.signature(fn)

        def recorder(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            k = replay.key(dotted, arguments)
            near, floats = replay.near_key(dotted, arguments)
            before = torch.get_rng_state()
            out = fn_out = fn(*args, **kwargs)
            after = torch.get_rng_state()
            rng = None if torch.equal(before, after) else after
            kind = type(out).__name__ if type(out) in (Counter, OrderedDict) else None
            if kind:
                out = dict(out)
            if not _storable(out):
                bad.add(k)
                notes.append(f"{dotted}: returns {type(out).__name__}, not stored")
            elif k in table and replay.digest(table[k]["output"]) != replay.digest(out):
                bad.add(k)  # an ambiguous call (the same arguments, other outputs) answers nothing
            else:
                table.setdefault(k, {"output": _detached(out), "rng": rng, "type": kind})
                candidates = close.setdefault(near, [])
                if not any(c["key"] == k for c in candidates):
                    candidates.append({"floats": floats, "key": k})
            return fn_out

        recorder.__wrapped__ = fn
        return recorder

    for item in targets:
        module = importlib.import_module(item.module)
        owner, _, name = item.qualname.rpartition(".")
        holder = getattr(module, owner) if owner else module
        original = (holder.__dict__ if owner else vars(module))[name]
        if isinstance(original, staticmethod | classmethod):
            continue
        saved.append((holder, name, original))
        setattr(holder, name, wrap(item.dotted, original))
    try:
        namespace: dict = {"__name__": "__main__"}
        for path in sorted((p.root / "solutions" / assignment).glob("*.ipynb")):
            notebook = json.loads(path.read_text(encoding="utf-8"))
            for cell in notebook.get("cells", []):
                if cell.get("cell_type") != "code":
                    continue
                meta = cell.get("metadata", {}).get("nbgrader", {})
                grade = bool(meta.get("grade")) and not meta.get("solution")
                for stmt in _check_statements("".join(cell.get("source", "")), grade):
                    code = compile(ast.Module(body=[stmt], type_ignores=[]), str(path), "exec")
                    try:
                        with contextlib.redirect_stdout(io.StringIO()):
                            exec(code, namespace)  # noqa: S102 (the instructor's own notebook)
                    except Exception as error:  # noqa: BLE001 (noted; the test sees the rest)
                        if grade:
                            where = meta.get("grade_id", "?")
                            notes.append(f"{assignment} {where}: {type(error).__name__}: {error}")
    finally:
        for holder, name, original in saved:
            setattr(holder, name, original)
    for k in bad:
        table.pop(k, None)
    return {"exact": table, "near": close}, notes


def write_check_data(p: Plan, folder: Path) -> list[str]:
    """``folder``/<assignment>.pt for each released assignment (see :func:`record_checks`)."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    notes = []
    for a in p.released():
        table, found = record_checks(p, a.name)
        notes += found
        if table["exact"]:
            torch.save(table, folder / f"{a.name}.pt")
    return notes


def build_wheel(p: Plan, out: Path) -> Path:
    """The student wheel of ``course_lib`` (embargoed bodies stubbed) in ``out``; its path."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="student-wheel-") as tmp:
        build = Path(tmp)
        stub_package(p.root / "course_lib", build / "course_lib", p.by_module())
        write_check_data(p, build / "course_lib" / "checks" / "data")
        pyproject = (p.root / "pyproject.toml").read_text(encoding="utf-8")
        # only course_lib (no autograder, no dev extras) and no README from the instructor copy
        pyproject = pyproject.replace('include = ["course_lib*", "autograder*"]',
                                      'include = ["course_lib*"]')  # fmt: skip
        pyproject = re.sub(r"^readme = .*\n", "", pyproject, flags=re.M)
        # a student edition with stubs says so in its version (0.1.0+student); with nothing
        # embargoed (every assignment reader-first) it is the public library, byte for byte
        if p.embargoed:
            pyproject = re.sub(r'^(version = "[^"+]+)"', r'\1+student"', pyproject, flags=re.M)
        pyproject = re.sub(
            r"\[project\.optional-dependencies\].*?(?=\n\[tool)", "", pyproject, flags=re.S
        )
        (build / "pyproject.toml").write_text(pyproject, encoding="utf-8")
        (build / "setup.cfg").write_text(
            "[options.package_data]\ncourse_lib.checks = data/*.pt\n", encoding="utf-8"
        )
        before = set(out.glob("*.whl"))
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", str(build), "--no-deps",
             "--no-build-isolation", "--no-index", "--quiet", "-w", str(out)],
            check=True,
        )  # fmt: skip
        made = sorted(set(out.glob("*.whl")) - before) or sorted(out.glob("course_lib-*.whl"))
        return made[-1]


WHEEL_WHOLE = "the library the book uses and shows, whole."
WHEEL_STUBBED = (
    "the library the book uses, except that the\n  functions you write in the assignments raise "
    '`NotImplementedError` and say where you implement\n  them (for example "You implement this '
    'in A3, part 3").'
)
STUDENT_README = """# {title}: student bundle

What is here:

- `{wheel}`: the course library, `course_lib`: {library}
- `assignments/`: the released assignments ({released}).
- `book/` (when present): the student edition of the book; open `book/index.html`.

## Install

With Python 3.11:

```bash
python -m venv .venv && source .venv/bin/activate
pip install {wheel} jupyterlab
```

(`pip` installs PyTorch and the other pinned dependencies from PyPI; PyTorch's CPU build is enough.)

## Open an assignment

```bash
jupyter lab assignments/
```

Implement each function where it says `YOUR CODE HERE`, then run the check cell beneath it. The
checks diagnose the usual mistakes; passing them is not the grade.

## Submit

Submit the notebook (`assignments/<name>/<name>.ipynb`) as your instructor says (nbgrader's
exchange, or an upload). Your grade comes from hidden tests that your instructor runs after the
deadline on fresh random inputs: hard-coding the checks' outputs earns nothing. Written answers
are graded by hand.
"""


def build_bundle(p: Plan, out: Path, book: Path | None = None) -> Path:
    """Write ``out``/ (notebooks, student wheel, book, README) and ``out``.zip; return the zip."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    wheel = build_wheel(p, out)
    released = p.released()
    for a in released:
        src = p.root / "assignments" / a.name
        skip = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
        shutil.copytree(src, out / "assignments" / a.name, ignore=skip)
    if book is not None:
        shutil.copytree(
            book, out / "book", ignore=shutil.ignore_patterns(".doctrees", ".buildinfo")
        )
    (out / "README.md").write_text(
        STUDENT_README.format(
            title="Attention and Transformers",
            wheel=wheel.name,
            library=WHEEL_STUBBED if p.embargoed else WHEEL_WHOLE,
            released=", ".join(a.label for a in released) or "none yet",
        ),
        encoding="utf-8",
    )
    archive = out.with_suffix(".zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(out.rglob("*")):
            if f.is_file():
                z.write(f, Path(out.name) / f.relative_to(out))
    return archive
