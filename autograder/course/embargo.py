"""The release policy: which assignments students get, and a scan that no answer key reaches them.

``course.yml`` at the course root is the schedule: each assignment is ``unreleased`` (held back:
not in the student bundle), ``released`` (in the bundle) or ``solutions-released`` (its answers
may be handed out: its key is no longer scanned for).

Every assignment is "reader-first": it grades work the book does not print, and its answer key
lives beside its hidden suite (``autograder/suites/<name>/<aN>_key.py``), which nothing a student
gets contains. So the book, its launch notebooks and the student bundle hold the whole course
library, and the bundle's wheel is the public ``course_lib``, byte for byte. An assignment with no
key beside its suite is an error of the schedule (:func:`plan`): nothing else would keep its
answers out of what students get.

The scan (:func:`scan`) looks, in files, HTML pages, wheels and zip archives, for the statements of
each key's graded units (the functions and methods with a ``### BEGIN SOLUTION`` region in the
source notebook) until the assignment's solutions are released; a statement that also appears in
``course_lib`` is not a secret.

    python -m autograder embargo list         # the schedule and each assignment's key
    python -m autograder embargo wheel --out DIR   # the public wheel of course_lib
    python -m autograder embargo bundle [--book DIR] [--out dist/student]
    python -m autograder embargo scan PATH...   # statements of an answer key in files
"""

from __future__ import annotations

import ast
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
STATES = ("unreleased", "released", "solutions-released")
SCHEDULE_FILE = "course.yml"


class ScheduleError(ValueError):
    """A mistake in ``course.yml``; the message names the file and line."""


@dataclass(frozen=True)
class Assignment:
    name: str  # a3_transformer
    state: str
    line: int  # 1-based line in course.yml

    @property
    def label(self) -> str:  # A3
        return self.name.split("_", 1)[0].upper()


@dataclass
class Plan:
    """The schedule resolved against the course: the assignments and their answer keys."""

    root: Path
    assignments: list[Assignment]
    keys: dict[str, Path]  # assignment -> its key beside the hidden suite

    def released(self) -> list[Assignment]:
        return [a for a in self.assignments if a.state != "unreleased"]


# ------------------------------------------------------------------------------------------
# The schedule
# ------------------------------------------------------------------------------------------

RETIRED_ALSO = (
    "'also' is retired: every assignment's answer key lives beside its hidden suite "
    "(autograder/suites/<name>/<aN>_key.py), so course_lib holds no answer to hold back; "
    "remove it"
)


def read_schedule(path: Path, known: list[str] | None = None) -> list[Assignment]:
    """Parse ``course.yml``: ``assignments: {name: state}`` or ``{name: {state: ...}}``."""
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
        if isinstance(vnode, yaml.ScalarNode):
            state, snode = vnode.value, vnode
        elif isinstance(vnode, yaml.MappingNode):
            fields = {k.value: (k, v) for k, v in vnode.value}
            for key, (fk, _) in fields.items():
                if key == "also":
                    fail(fk, RETIRED_ALSO)
                if key != "state":
                    fail(fk, f"unknown key {key!r} for {name} (expected 'state')")
            if "state" not in fields:
                fail(vnode, f"{name} has no 'state'")
            snode = fields["state"][1]
            state = snode.value if isinstance(snode, yaml.ScalarNode) else None
        else:
            fail(vnode, f"the state of {name} should be one of {', '.join(STATES)}")
        if state not in STATES:
            fail(snode, f"unknown state {state!r} for {name} (expected one of {', '.join(STATES)})")
        out.append(Assignment(name, state, knode.start_mark.line + 1))
    return out


def states(root: Path) -> dict[str, str]:
    """Each listed assignment's state in ``root``'s ``course.yml`` (``{}`` without one: a course
    without a schedule hands out every assignment it releases)."""
    path = Path(root) / SCHEDULE_FILE
    return {a.name: a.state for a in read_schedule(path)} if path.exists() else {}


def handed_out(root: Path, assignment: str) -> bool:
    """Whether students have ``assignment``: not listed ``unreleased`` in ``course.yml``."""
    return states(root).get(assignment) != "unreleased"


# ------------------------------------------------------------------------------------------
# The assignments and their keys
# ------------------------------------------------------------------------------------------


def _has_solution(lines: list[str], node: ast.AST) -> bool:
    return any("BEGIN SOLUTION" in line for line in lines[node.lineno - 1 : node.end_lineno])


def graded_units(root: Path, assignment: str) -> list[str]:
    """The functions and methods with a solution region in the source notebook (qualnames:
    ``RMSNorm.forward``, ``beam_search``): the units whose bodies in the key are secrets."""
    units: list[str] = []
    for path in sorted((root / "solutions" / assignment).glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        for cell in notebook.get("cells", []):
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.get("cell_type") != "code" or not meta.get("solution"):
                continue
            source = "".join(cell.get("source", ""))
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            lines = source.splitlines()
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    if _has_solution(lines, node):
                        units.append(node.name)
                elif isinstance(node, ast.ClassDef):
                    for item in node.body:
                        is_def = isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                        if is_def and _has_solution(lines, item):
                            units.append(f"{node.name}.{item.name}")
    return units


def own_key(root: Path, assignment: str) -> Path | None:
    """The answer key beside the hidden suite (``autograder/suites/<name>/<aN>_key.py`` or
    ``key.py``); None when there is none."""
    suite = root / "autograder" / "suites" / assignment
    found = sorted(suite.glob("*key.py")) if suite.is_dir() else []
    return found[0] if found else None


def known_assignments(root: Path) -> list[str]:
    folder = root / "solutions"
    return sorted(p.name for p in folder.glob("a*_*") if p.is_dir()) if folder.is_dir() else []


def plan(root: Path = PACKAGE_ROOT, schedule: Path | None = None) -> Plan:
    """Resolve the schedule: every listed assignment and the answer key beside its hidden suite.

    An assignment without a key there is a :class:`ScheduleError`: its graded answers would have
    no place that nothing a student gets contains.
    """
    root = Path(root).resolve()
    schedule = schedule or root / SCHEDULE_FILE
    assignments = read_schedule(schedule, known_assignments(root))
    keys: dict[str, Path] = {}
    for a in assignments:
        key = own_key(root, a.name)
        if key is None:
            suite = Path("autograder", "suites", a.name)
            raise ScheduleError(
                f"{schedule}:{a.line}: {a.name} has no answer key beside its hidden suite "
                f"({suite}/): graded answers must live beside the hidden suite, in "
                f"{suite / (a.name.split('_', 1)[0] + '_key.py')}, which nothing a student "
                "gets contains (the book and the student bundle hold the whole course_lib)"
            )
        keys[a.name] = key
    return Plan(root, assignments, keys)


# ------------------------------------------------------------------------------------------
# Scanning: no statement of an answer key in what students get
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
    """``<name> key: RMSNorm.forward`` -> token strings of that graded unit's statements in the
    key beside the hidden suite, for every assignment whose solutions are not released. A
    statement that also appears in ``course_lib`` (which students get whole) is not a secret."""
    found: dict[str, list[str]] = {}
    for a in p.assignments:
        if a.state == "solutions-released":
            continue
        source = p.keys[a.name].read_text(encoding="utf-8")
        for unit in graded_units(p.root, a.name):
            found[f"{a.name} key: {unit}"] = _body_statements(source, unit)
    shipped = [
        " ".join(tokens(path.read_text(encoding="utf-8")))
        for path in sorted((p.root / "course_lib").rglob("*.py"))
    ]
    haystack = f" {' '.join(shipped)} "
    return {d: [s for s in ss if f" {s} " not in haystack] for d, ss in found.items()}


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
    """Statements of an answer key found in ``paths`` (files or folders): ``file: unit:
    statement``."""
    table = secrets(p)
    hits: list[str] = []
    files = []
    for path in paths:
        files += sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
    for f in files:
        if f.suffix not in (".py", ".ipynb", ".html", ".htm", ".txt", ".md", ".whl", ".zip"):
            continue
        hay = f" {' '.join(tokens(_text_of(f)))} "
        for unit, statements in table.items():
            hits += [f"{f}: {unit}: {s}" for s in statements if f" {s} " in hay]
    return hits


# ------------------------------------------------------------------------------------------
# The public wheel and the student bundle
# ------------------------------------------------------------------------------------------


def build_wheel(root: Path, out: Path) -> Path:
    """The wheel of ``course_lib`` alone (no ``autograder``, no dev extras) in ``out``; its
    path. Its files are the repository's, byte for byte, with the visible checks' recorded
    answers (``course_lib/checks/recorded/*.pt``, package data in ``pyproject.toml``)."""
    root = Path(root)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="course-lib-wheel-") as tmp:
        build = Path(tmp)
        shutil.copytree(
            root / "course_lib",
            build / "course_lib",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
        # only course_lib (no autograder, no dev extras) and no README from the instructor copy
        pyproject = pyproject.replace('include = ["course_lib*", "autograder*"]',
                                      'include = ["course_lib*"]')  # fmt: skip
        pyproject = re.sub(r"^readme = .*\n", "", pyproject, flags=re.M)
        pyproject = re.sub(
            r"\[project\.optional-dependencies\].*?(?=\n\[tool)", "", pyproject, flags=re.S
        )
        (build / "pyproject.toml").write_text(pyproject, encoding="utf-8")
        before = set(out.glob("*.whl"))
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", str(build), "--no-deps",
             "--no-build-isolation", "--no-index", "--quiet", "-w", str(out)],
            check=True,
        )  # fmt: skip
        made = sorted(set(out.glob("*.whl")) - before) or sorted(out.glob("course_lib-*.whl"))
        return made[-1]


STUDENT_NBGRADER_CONFIG = """\
# nbgrader's settings for a student of this course (nbgrader fetch_assignment, submit,
# fetch_feedback, and the Assignments tab of Jupyter). Copy this file to
# ~/.jupyter/nbgrader_config.py. nbgrader itself never reads NBGRADER_EXCHANGE: this file does.
import os

c = get_config()  # noqa: F821 (injected by traitlets when nbgrader loads this file)
c.CourseDirectory.course_id = os.environ.get("COURSE_ID", "attention-and-transformers")
# The exchange folder your instructor names (export NBGRADER_EXCHANGE=...); nbgrader's default
# otherwise: /usr/local/share/nbgrader/exchange.
if os.environ.get("NBGRADER_EXCHANGE"):
    c.Exchange.root = os.environ["NBGRADER_EXCHANGE"]
"""

STUDENT_README = """# {title}: student bundle

What is here:

- `{wheel}`: the course library, `course_lib`: the library the book uses and shows, whole.
- `assignments/`: the released assignments ({released}).
- `book/` (when present): the book; open `book/index.html`.
- `nbgrader_config.py`: nbgrader's settings, for a course that hands out assignments through
  nbgrader's exchange (below).

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

Submit the notebook (`assignments/<name>/<name>.ipynb`) as your instructor says: an upload, or
nbgrader's exchange on a shared machine. For the exchange, install nbgrader in your environment
(`pip install nbgrader`), copy `nbgrader_config.py` to `~/.jupyter/nbgrader_config.py`, set the
exchange folder your instructor names (`export NBGRADER_EXCHANGE=/path/they/give`, e.g. in
`~/.bashrc`; not needed for nbgrader's default `/usr/local/share/nbgrader/exchange`), and check
with `nbgrader list`; then `nbgrader fetch_assignment <name>`, work, `nbgrader submit <name>`.

Your grade comes from hidden tests that your instructor runs after the
deadline on fresh random inputs: hard-coding the checks' outputs earns nothing. Written answers
are graded by hand.
"""


def build_bundle(p: Plan, out: Path, book: Path | None = None) -> Path:
    """Write ``out``/ (notebooks, public wheel, book, README, the student's nbgrader config) and
    ``out``.zip; return the zip."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    wheel = build_wheel(p.root, out)
    released = p.released()
    for a in released:
        src = p.root / "assignments" / a.name
        skip = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
        shutil.copytree(src, out / "assignments" / a.name, ignore=skip)
    if book is not None:
        shutil.copytree(
            book, out / "book", ignore=shutil.ignore_patterns(".doctrees", ".buildinfo")
        )
    (out / "nbgrader_config.py").write_text(STUDENT_NBGRADER_CONFIG, encoding="utf-8")
    (out / "README.md").write_text(
        STUDENT_README.format(
            title="Attention and Transformers",
            wheel=wheel.name,
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
