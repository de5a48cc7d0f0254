"""Reading submitted notebooks defensively and extracting the code that the grader will run.

Nothing here executes student code. A submission is read as bytes (its SHA-256 recorded, the file
never written to), decoded, parsed and matched against the trusted release notebook by nbgrader
``grade_id``:

- solution cells contribute the student's code;
- read-only (locked) provided cells contribute the *release's* code, so editing or deleting them
  changes nothing;
- grade cells (the visible checks) are skipped: the score comes from the hidden suite;
- cells the student added without nbgrader metadata contribute the student's code (helpers).

From that code only imports, function and class definitions and constant assignments are kept
(:func:`extract`); IPython magics, shell escapes and top-level statements such as a training run
are dropped and listed in the notes, so grading never waits for a notebook's experiments.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_NOTEBOOK_BYTES = 64 * 1024**2
MAX_NOTES = 40

# Calls allowed on the right-hand side of a kept module-level assignment (cheap and pure).
SAFE_CALLS = {
    "int", "float", "str", "bool", "complex", "tuple", "list", "dict", "set", "frozenset",
    "range", "slice", "len", "min", "max", "abs", "round", "sorted", "reversed", "sum", "zip",
    "enumerate", "object", "property", "staticmethod", "classmethod", "namedtuple",
    "NamedTuple", "TypedDict", "TypeVar", "NewType", "field", "partial",
    "torch.device", "torch.finfo", "torch.iinfo", "collections.namedtuple", "typing.TypeVar",
    "typing.NewType", "typing.NamedTuple", "dataclasses.field", "functools.partial",
    "re.compile", "math.sqrt", "math.log", "math.exp", "math.pow", "math.ceil", "math.floor",
    "math.log2", "math.prod",
}  # fmt: skip
# Cell magics whose body is Python; any other cell magic (%%bash, %%writefile, ...) drops the cell.
PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun"}
MAGIC_FILE_SIGNATURES = {
    b"\x89PNG": "a PNG image",
    b"%PDF": "a PDF document",
    b"PK\x03\x04": "a zip archive",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
}


class NotebookError(Exception):
    """The file cannot be graded as a notebook; the message says why and how to fix it."""


@dataclass
class Cell:
    index: int
    cell_type: str
    source: str
    nbgrader: dict


@dataclass
class ReadResult:
    cells: list[Cell]
    sha256: str
    size: int
    notes: list[str] = field(default_factory=list)
    raw: dict | None = None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _source_text(source: Any) -> str:
    if isinstance(source, list):
        return "".join(s if isinstance(s, str) else str(s) for s in source)
    return source if isinstance(source, str) else ""


def read_notebook(path: Path, *, max_bytes: int = MAX_NOTEBOOK_BYTES) -> ReadResult:
    """Parse ``path`` as a v4 notebook without trusting it; raise NotebookError with a reason."""
    path = Path(path)
    if not path.exists():
        raise NotebookError(f"missing: {path.name} was not submitted")
    if not path.is_file():
        raise NotebookError(f"{path.name} is not a file")
    size = path.stat().st_size
    if size == 0:
        raise NotebookError(f"{path.name} is empty (0 bytes): save the notebook and submit again")
    if size > max_bytes:
        raise NotebookError(
            f"{path.name} is {size / 1024**2:.0f} MB, over the {max_bytes / 1024**2:.0f} MB limit:"
            " clear the outputs (Kernel > Restart & Clear Output) and submit again"
        )
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    notes: list[str] = []
    for magic, what in MAGIC_FILE_SIGNATURES.items():
        if data.startswith(magic):
            raise NotebookError(f"{path.name} is not a notebook: it looks like {what}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        notes.append(
            f"{path.name} is not valid UTF-8 (first bad byte at offset {error.start}); "
            "undecodable bytes were replaced"
        )
        text = data.decode("utf-8", errors="replace")
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as error:
        raise NotebookError(
            f"{path.name} is not a notebook: invalid JSON at line {error.lineno}, column "
            f"{error.colno} ({error.msg}); was it edited outside Jupyter?"
        ) from None
    except RecursionError:
        raise NotebookError(f"{path.name} is not a notebook: JSON nested too deeply") from None
    if not isinstance(nb, dict):
        raise NotebookError(f"{path.name} is not a notebook: the JSON is not an object")
    if "worksheets" in nb or nb.get("nbformat", 4) != 4:
        raise NotebookError(
            f"{path.name} uses notebook format {nb.get('nbformat')}: open it in a current "
            "Jupyter and save it again (format 4 is needed)"
        )
    raw_cells = nb.get("cells")
    if not isinstance(raw_cells, list):
        raise NotebookError(f"{path.name} is not a notebook: it has no list of cells")
    cells = []
    for i, raw in enumerate(raw_cells):
        if not isinstance(raw, dict) or not isinstance(raw.get("cell_type"), str):
            notes.append(f"cell {i} is malformed and was skipped")
            continue
        metadata = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
        meta = metadata.get("nbgrader") if isinstance(metadata.get("nbgrader"), dict) else {}
        cells.append(Cell(i, raw["cell_type"], _source_text(raw.get("source")), dict(meta)))
    return ReadResult(cells=cells, sha256=digest, size=size, notes=notes, raw=nb)


# --------------------------------------------------------------------------------------------
# Matching against the release, by grade_id
# --------------------------------------------------------------------------------------------


def cell_role(meta: dict) -> str:
    """'solution', 'grade' (tests / visible checks / manual answers), 'locked' or 'plain'."""
    if meta.get("solution"):
        return "solution"
    if meta.get("grade"):
        return "grade"
    if meta.get("locked"):
        return "locked"
    return "plain"


@dataclass
class CodeChunk:
    label: str  # shown in tracebacks and notes, e.g. "cell 3 (attention)"
    source: str
    origin: str  # "student" or "release"


def assemble(student: list[Cell], release: list[Cell]) -> tuple[list[CodeChunk], list[str]]:
    """The code cells to run, in notebook order, with release code for provided cells."""
    notes: list[str] = []
    by_id = {c.nbgrader["grade_id"]: c for c in release if c.nbgrader.get("grade_id")}
    seen: dict[str, int] = {}
    chunks: list[CodeChunk] = []
    for cell in student:
        gid = cell.nbgrader.get("grade_id")
        if cell.cell_type != "code":
            if gid in by_id:
                seen[gid] = seen.get(gid, 0) + 1
            continue
        label = f"cell {cell.index}" + (f" ({gid})" if gid else "")
        if gid and gid in by_id:
            seen[gid] = seen.get(gid, 0) + 1
            if seen[gid] == 2:
                notes.append(f"grade_id {gid!r} appears more than once (duplicated cell)")
            ref = by_id[gid]
            role = cell_role(ref.nbgrader)
            if role == "solution":
                chunks.append(CodeChunk(label, cell.source, "student"))
            elif role in ("grade", "locked"):
                if cell.source.strip() != ref.source.strip():
                    what = "check" if role == "grade" else "read-only"
                    notes.append(
                        f"{what} cell {gid!r} was edited; the edit was ignored"
                        + (" (the hidden tests grade your code)" if role == "grade" else "")
                    )
                if role == "locked" and seen[gid] == 1:
                    chunks.append(CodeChunk(label, ref.source, "release"))
            else:
                chunks.append(CodeChunk(label, cell.source, "student"))
        elif cell_role(cell.nbgrader) in ("grade",):
            notes.append(
                f"cell {cell.index} claims to be a grade cell {gid!r} unknown to the release"
            )
        else:
            chunks.append(CodeChunk(label, cell.source, "student"))
    provided = []
    for ref in release:
        gid = ref.nbgrader.get("grade_id")
        if not gid or gid in seen:
            continue
        role = cell_role(ref.nbgrader)
        if role == "locked" and ref.cell_type == "code":
            provided.append(CodeChunk(f"provided cell ({gid})", ref.source, "release"))
            notes.append(f"read-only cell {gid!r} was deleted; it was restored from the release")
        elif role == "solution":
            notes.append(f"solution cell {gid!r} is missing (deleted?)")
        elif role == "grade":
            notes.append(f"grade cell {gid!r} is missing (deleted?)")
    return provided + chunks, notes


# --------------------------------------------------------------------------------------------
# Extraction: keep imports, definitions and constants; drop magics and top-level statements
# --------------------------------------------------------------------------------------------

_MAGIC_LINE = re.compile(r"^(\s*)(%|!|\w+\s*=\s*[!%])")


def strip_magics(source: str) -> tuple[str | None, list[str]]:
    """Replace IPython magics and shell escapes by ``pass`` (line numbers kept)."""
    lines = source.split("\n")
    dropped: list[str] = []
    if lines and lines[0].lstrip().startswith("%%"):
        name = lines[0].lstrip()[2:].split()[0] if lines[0].lstrip()[2:].split() else ""
        if name not in PYTHON_CELL_MAGICS:
            return None, [f"cell magic %%{name}"]
        dropped.append(f"cell magic %%{name}")
        lines[0] = ""
    for i, line in enumerate(lines):
        m = _MAGIC_LINE.match(line)
        stripped = line.strip()
        if m or (stripped.endswith("?") and not stripped.startswith("#") and "(" not in stripped):
            indent = m.group(1) if m else line[: len(line) - len(line.lstrip())]
            dropped.append(stripped[:60])
            lines[i] = indent + "pass"
    return "\n".join(lines), dropped


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _safe_value(node: ast.AST | None) -> bool:
    """True if evaluating ``node`` at import time runs no user or expensive code."""
    if node is None:
        return True
    for sub in _walk_outside_lambdas(node):
        if isinstance(sub, ast.Call):
            name = _dotted(sub.func)
            if name is None or (name not in SAFE_CALLS):
                return False
        elif isinstance(sub, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)):
            return False
        elif isinstance(sub, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return False
    return True


def _walk_outside_lambdas(node: ast.AST):
    stack = [node]
    while stack:
        sub = stack.pop()
        yield sub
        if isinstance(sub, ast.Lambda):
            continue
        stack.extend(ast.iter_child_nodes(sub))


def _target_ok(target: ast.AST) -> bool:
    if isinstance(target, ast.Name):
        return True
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_target_ok(t) for t in target.elts)
    return False  # attribute / subscript targets modify something else: never kept


def keep_statement(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    if isinstance(stmt, ast.Assign):
        return all(_target_ok(t) for t in stmt.targets) and _safe_value(stmt.value)
    if isinstance(stmt, ast.AnnAssign):
        return _target_ok(stmt.target) and _safe_value(stmt.value)
    if isinstance(stmt, ast.Try):
        bodies = stmt.body + stmt.orelse + stmt.finalbody
        bodies += [s for h in stmt.handlers for s in h.body]
        return all(keep_statement(s) or isinstance(s, ast.Pass) for s in bodies)
    if isinstance(stmt, ast.If):
        return _safe_value(stmt.test) and all(
            keep_statement(s) or isinstance(s, ast.Pass) for s in stmt.body + stmt.orelse
        )
    return False


@dataclass
class Extracted:
    label: str
    source: str  # the cell after magics were replaced by ``pass`` (line numbers unchanged)
    keep: list[int]  # indices of the top-level statements of ``ast.parse(source)`` to run
    tree: ast.Module  # just the kept statements (what the static scan reads)
    dropped: list[str]
    origin: str = "student"  # "release" for read-only provided cells (trusted, not scanned)


def extract(chunk: CodeChunk) -> tuple[Extracted | None, list[str]]:
    """Keep imports, defs, classes and constants of one code cell; notes say what was dropped."""
    notes: list[str] = []
    source, magics = strip_magics(chunk.source)
    if source is None:
        return None, [f"{chunk.label}: {magics[0]} cell skipped"]
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return None, [
            f"{chunk.label}: syntax error at line {error.lineno}: {error.msg}; the cell was skipped"
        ]
    except (ValueError, RecursionError, MemoryError) as error:
        return None, [f"{chunk.label}: cannot be parsed ({type(error).__name__}); skipped"]
    keep, kept, dropped = [], [], []
    lines = source.split("\n")
    for i, stmt in enumerate(tree.body):
        if keep_statement(stmt):
            keep.append(i)
            kept.append(stmt)
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            if not isinstance(stmt, ast.Pass):
                text = lines[stmt.lineno - 1].strip() if stmt.lineno <= len(lines) else ""
                dropped.append(f"line {stmt.lineno}: {text[:70]}")
    if dropped:
        shown = "; ".join(dropped[:3]) + (
            f"; and {len(dropped) - 3} more" if len(dropped) > 3 else ""
        )
        notes.append(f"{chunk.label}: top-level statements not run by the grader: {shown}")
    module = ast.Module(body=kept, type_ignores=[])
    return Extracted(chunk.label, source, keep, module, dropped, chunk.origin), notes
