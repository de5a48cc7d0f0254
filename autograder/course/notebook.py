"""Reading submitted notebooks defensively and extracting the code that the grader will run.

Nothing here executes student code. A submission is read as bytes (its SHA-256 recorded, the file
never written to), decoded, parsed and matched against the trusted release notebook by nbgrader
``grade_id``:

- solution cells contribute the student's code;
- read-only (locked) provided cells contribute the *release's* code, so editing or deleting them
  changes nothing;
- grade cells (the visible checks) are skipped: the score comes from the hidden suite;
- code cells of the release without nbgrader metadata contribute the *release's* code.

The code graded is therefore the release's skeleton with the student's solution cells in it,
exactly what the autograded notebook shows. Code the student put anywhere else (added cells, cells
whose type was changed, second copies of a ``grade_id``) is not run; :func:`review` lists it for
the instructor and the notes tell the student.

From that code only imports, function and class definitions and constant assignments are kept
(:func:`extract`); IPython magics, shell escapes and top-level statements such as a training run
are dropped and listed in the notes, so grading never waits for a notebook's experiments.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_NOTEBOOK_BYTES = 64 * 1024**2
# Student code parsed per notebook (solution cells): parsing costs ~640 bytes of memory per byte.
MAX_CODE_BYTES = 256 * 1024
MAX_NOTES = 40
MAX_INT_DIGITS = 64  # longer JSON integers (an execution_count of 5,000 digits) are not parsed
CELL_TYPES = ("code", "markdown", "raw")

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


def oversized(chunks: list) -> str | None:
    """Why the student's code in ``chunks`` is too large to parse safely (parsing costs ~640 bytes
    of memory per byte of code), or None."""
    size = sum(len(c.source.encode("utf-8")) for c in chunks if c.origin == "student")
    if size <= MAX_CODE_BYTES:
        return None
    return (
        f"the code in the solution cells is {size / 1024:.0f} KB, over the "
        f"{MAX_CODE_BYTES // 1024} KB limit per notebook"
    )


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
    """The digest of a regular file (a link, FIFO or device raises OSError: nothing blocks)."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{Path(path).name} is not a regular file")
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` without lone surrogates (from JSON escapes such as ``"\\ud800"``), which no
    encoder accepts; they become U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def _source_text(source: Any) -> str:
    if isinstance(source, list):
        return clean_text("".join(s for s in source if isinstance(s, str)))
    return clean_text(source) if isinstance(source, str) else ""


def _safe_int(digits: str) -> int | None:
    return int(digits) if len(digits) <= MAX_INT_DIGITS else None


def _nbgrader_meta(meta: dict, index: int, notes: list[str]) -> dict:
    """The nbgrader fields the grader reads, with their types checked (a student wrote them)."""
    out: dict[str, Any] = {}
    gid = meta.get("grade_id")
    if isinstance(gid, str) and gid:
        out["grade_id"] = clean_text(gid)[:200]
    elif gid is not None:
        notes.append(f"cell {index}: its grade_id is not text ({type(gid).__name__}); ignored")
    for key in ("solution", "grade", "locked"):
        if meta.get(key) is True:
            out[key] = True
    points = meta.get("points")
    if isinstance(points, (int, float)) and not isinstance(points, bool):
        out["points"] = points
    return out


def _read_regular(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``path`` if it is a regular file that is not a symbolic link."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise NotebookError(f"missing: {path.name} was not submitted") from None
    except OSError as error:
        raise NotebookError(f"{path.name} cannot be read ({error.strerror})") from None
    if stat.S_ISLNK(info.st_mode):
        raise NotebookError(
            f"{path.name} is a symbolic link, not a file: links are refused; submit the notebook "
            "itself"
        )
    if not stat.S_ISREG(info.st_mode):
        raise NotebookError(f"{path.name} is not a regular file (a folder, pipe or device)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        raise NotebookError(f"{path.name} cannot be read ({error.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise NotebookError(f"{path.name} is not a regular file")
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise NotebookError(
                f"{path.name} is empty (0 bytes): save the notebook and submit again"
            )
        if size > max_bytes:
            raise NotebookError(
                f"{path.name} is {size / 1024**2:.0f} MB, over the {max_bytes / 1024**2:.0f} MB "
                "limit: clear the outputs (Kernel > Restart & Clear Output) and submit again"
            )
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise NotebookError(f"{path.name} is over the {max_bytes / 1024**2:.0f} MB limit")
    return data


def read_regular(path: Path, *, max_bytes: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of a file from a student's folder, read as :func:`read_notebook` reads: a
    regular file, not a link, FIFO or device, not empty, at most ``max_bytes``; else
    NotebookError with the reason. Every reader of submission files goes through here."""
    return _read_regular(Path(path), max_bytes)


def read_notebook(path: Path, *, max_bytes: int = MAX_NOTEBOOK_BYTES) -> ReadResult:
    """Parse ``path`` as a v4 notebook without trusting it; raise NotebookError with a reason."""
    path = Path(path)
    data = _read_regular(path, max_bytes)
    size = len(data)
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
        nb = json.loads(text, parse_int=_safe_int)
    except json.JSONDecodeError as error:
        raise NotebookError(
            f"{path.name} is not a notebook: invalid JSON at line {error.lineno}, column "
            f"{error.colno} ({error.msg}); was it edited outside Jupyter?"
        ) from None
    except RecursionError:
        raise NotebookError(f"{path.name} is not a notebook: JSON nested too deeply") from None
    except (ValueError, MemoryError) as error:
        raise NotebookError(
            f"{path.name} is not a notebook: its JSON cannot be read ({type(error).__name__})"
        ) from None
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
        if not isinstance(raw, dict) or raw.get("cell_type") not in CELL_TYPES:
            notes.append(f"cell {i} is malformed and was skipped")
            continue
        metadata = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
        meta = metadata.get("nbgrader") if isinstance(metadata.get("nbgrader"), dict) else {}
        meta = _nbgrader_meta(meta, i, notes)
        cells.append(Cell(i, raw["cell_type"], _source_text(raw.get("source")), meta))
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
    """The code to run, in the release's order: the student's solution cells (by ``grade_id``,
    first copy), the release's own code for read-only and metadata-less cells. Notes say what
    was ignored or restored; :func:`review` lists the same for the instructor."""
    notes: list[str] = []
    by_id: dict[str, list[Cell]] = {}
    for cell in student:
        gid = cell.nbgrader.get("grade_id")
        if gid:
            by_id.setdefault(gid, []).append(cell)
    chunks: list[CodeChunk] = []
    for ref in release:
        gid = ref.nbgrader.get("grade_id")
        role = cell_role(ref.nbgrader) if gid else "plain"
        if ref.cell_type != "code":
            continue
        if role == "plain":
            chunks.append(CodeChunk(f"provided cell {ref.index}", ref.source, "release"))
            continue
        copies = by_id.get(gid, [])
        # a copy pasted and retyped (JupyterLab keeps the metadata) must not displace the cell
        # whose type matches the release: that one counts, the first of them if several
        matching = [c for c in copies if c.cell_type == ref.cell_type]
        if len(copies) > 1:
            notes.append(
                f"grade_id {gid!r} appears more than once (duplicated cell): only the first "
                f"{ref.cell_type} cell with it counts"
            )
        mine = matching[0] if matching else (copies[0] if copies else None)
        if mine is not None and mine.cell_type != "code":
            notes.append(
                f"cell {gid!r} was changed from a code cell to {mine.cell_type}: its content "
                "was not graded"
            )
            mine = None
        if role == "solution":
            if mine is None:
                if not copies:
                    notes.append(f"solution cell {gid!r} is missing (deleted?)")
                continue
            chunks.append(CodeChunk(f"cell {mine.index} ({gid})", mine.source, "student"))
        elif role in ("grade", "locked"):
            if mine is None and not copies:
                if role == "locked":
                    notes.append(
                        f"read-only cell {gid!r} was deleted; it was restored from the release"
                    )
                else:
                    notes.append(f"grade cell {gid!r} is missing (deleted?)")
            elif mine is not None and mine.source.strip() != ref.source.strip():
                what = "check" if role == "grade" else "read-only"
                notes.append(
                    f"{what} cell {gid!r} was edited; the edit was ignored"
                    + (" (the hidden tests grade your code)" if role == "grade" else "")
                )
            if role == "locked":
                label = f"cell {mine.index} ({gid})" if mine is not None else f"provided ({gid})"
                chunks.append(CodeChunk(label, ref.source, "release"))
    for cell in review_cells(student, release)["extra"]:
        notes.append(
            f"cell {cell.index} holds code that is not part of the assignment (an added or "
            "edited cell without nbgrader metadata): it was not graded; put your code in the "
            "solution cells"
        )
    for cell in student:
        gid = cell.nbgrader.get("grade_id")
        if gid and gid not in {r.nbgrader.get("grade_id") for r in release}:
            if cell_role(cell.nbgrader) == "grade":
                notes.append(
                    f"cell {cell.index} claims to be a grade cell {gid!r} unknown to the release"
                )
    return chunks, notes


def review_cells(student: list[Cell], release: list[Cell]) -> dict[str, list]:
    """What in ``student`` departs from the release, for the instructor.

    ``extra``: code cells with code that are not release cells (no known ``grade_id`` and not
    equal to a metadata-less release cell); ``duplicated``: grade_ids present more than once;
    ``retyped``: grade_ids none of whose cells has the release's cell type.
    """
    known = {c.nbgrader["grade_id"]: c for c in release if c.nbgrader.get("grade_id")}
    plain = {c.source.strip() for c in release if not c.nbgrader.get("grade_id")}
    counts: dict[str, int] = {}
    types: dict[str, set[str]] = {}
    extra = []
    for cell in student:
        gid = cell.nbgrader.get("grade_id")
        if gid in known:
            counts[gid] = counts.get(gid, 0) + 1
            types.setdefault(gid, set()).add(cell.cell_type)
        elif cell.cell_type == "code" and cell.source.strip() and cell.source.strip() not in plain:
            if not _only_comments(cell.source):
                extra.append(cell)
    duplicated = sorted(g for g, n in counts.items() if n > 1)
    retyped = [g for g in counts if known[g].cell_type not in types[g]]  # no copy kept its type
    return {"extra": extra, "duplicated": duplicated, "retyped": retyped}


# Characters that make code or text read differently from what it is (Trojan Source: the
# bidirectional controls) or hide it (zero-width): flagged for graders, never removed.
INVISIBLE = frozenset(
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
    "\u200b\u200c\u200d\u2060\ufeff"
)


def invisible_characters(student: list[Cell], release: list[Cell]) -> tuple[list[int], set[str]]:
    """The student's cells (solution cells and added cells) holding bidirectional controls or
    zero-width characters that the release's cell does not hold, and which characters."""
    known = {c.nbgrader["grade_id"]: c for c in release if c.nbgrader.get("grade_id")}
    cells, found = [], set()
    for cell in student:
        ref = known.get(cell.nbgrader.get("grade_id"))
        if ref is not None and cell_role(ref.nbgrader) != "solution":
            continue  # restored from the release, or not the student's text
        here = {ch for ch in cell.source if ch in INVISIBLE}
        here -= set(ref.source) if ref is not None else set()
        if here:
            cells.append(cell.index)
            found |= here
    return cells, found


def review(student: list[Cell], release: list[Cell]) -> list[str]:
    """One line per departure from the release (see :func:`review_cells`)."""
    found = review_cells(student, release)
    flags = []
    cells, chars = invisible_characters(student, release)
    if cells:
        names = ", ".join(f"U+{ord(c):04X}" for c in sorted(chars))
        flags.append(
            f"bidirectional or zero-width characters in cells {', '.join(map(str, cells[:10]))} "
            f"({names}): what a grader reads may not be what runs"
        )
    if found["extra"]:
        cells = ", ".join(str(c.index) for c in found["extra"][:10])
        flags.append(f"extra code cells not graded: {cells}")
    if found["duplicated"]:
        flags.append("duplicated grade_id: " + ", ".join(found["duplicated"][:10]))
    if found["retyped"]:
        flags.append("changed cell type: " + ", ".join(found["retyped"][:10]))
    return flags


def _only_comments(source: str) -> bool:
    return all(not line.strip() or line.lstrip().startswith("#") for line in source.split("\n"))


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


def _binds(stmt: ast.stmt) -> set[str]:
    """Names a top-level statement binds (assignment targets, definitions, imports)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    return {
        n.id
        for t in targets
        if t is not None
        for n in ast.walk(t)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def _reads(stmt: ast.stmt) -> set[str]:
    """Names an assignment's value reads when it runs (a lambda's body runs later)."""
    value = getattr(stmt, "value", None) if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
    if value is None:
        return set()
    return {
        n.id
        for n in _walk_outside_lambdas(value)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }


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
    unbound: set[str] = set()  # names only a dropped statement of this cell would have bound
    for i, stmt in enumerate(tree.body):
        if keep_statement(stmt) and not (_reads(stmt) & unbound):
            keep.append(i)
            kept.append(stmt)
            unbound -= _binds(stmt)
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            if not isinstance(stmt, ast.Pass):
                text = lines[stmt.lineno - 1].strip() if stmt.lineno <= len(lines) else ""
                dropped.append(f"line {stmt.lineno}: {text[:70]}")
            unbound |= _binds(stmt)  # `x = images[idx]` after a dropped `images = load()`
    if dropped and chunk.origin == "student":  # the release's own cells: nothing to tell
        shown = "; ".join(dropped[:3]) + (
            f"; and {len(dropped) - 3} more" if len(dropped) > 3 else ""
        )
        notes.append(f"{chunk.label}: top-level statements not run by the grader: {shown}")
    module = ast.Module(body=kept, type_ignores=[])
    return Extracted(chunk.label, source, keep, module, dropped, chunk.origin), notes
