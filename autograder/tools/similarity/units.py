"""Units: one graded cell of one submission, of the reference or of a past submission, built
from exactly the code ``grade`` runs (:func:`autograder.course.notebook.assemble`)."""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course.layout import PACKAGE_ROOT, Course
from autograder.course.notebook import (
    CodeChunk,
    NotebookError,
    assemble,
    extract,
    oversized,
    read_notebook,
)
from autograder.host.intake import Submission
from autograder.tools.similarity.fingerprints import fingerprints
from autograder.tools.similarity.normalise import (
    GradedCell,
    Normaliser,
    _Canon,
    _parse,
    _tag,
    _Vocabulary,
    load_release,
)

MIN_TOKENS = 15  # fewer normalised tokens of one's own: not compared


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
    shapes: set[int] = field(default_factory=set)  # fingerprints of the shape stream

    @property
    def comparable(self) -> bool:
        return self.reason is None


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
        self.base_shapes: dict[str, set[int]] = {}
        for cell in self.release.cells:
            toks: list[str] = []
            stmts = copy.deepcopy(self._base_stmts[cell.key])
            for s in ast.walk(ast.Module(body=stmts, type_ignores=[])):
                if isinstance(s, (ast.FunctionDef, ast.ClassDef)):
                    s._base = False  # type: ignore[attr-defined]
            stmts = [_Canon(self.norm.known, self.release.aliases).visit(s) for s in stmts]
            stmts = [s for s in stmts if s is not None]
            self.norm.tokens(stmts, toks, [])
            self.release.base_tokens[cell.key] = set(fingerprints(toks))
            shape: list[str] = []
            self.norm.tokens([_Vocabulary().visit(s) for s in stmts], shape, [])
            self.base_shapes[cell.key] = set(fingerprints(shape))

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
            unit.tokens, unit.tags, unit.prints, unit.reason, unit.shapes = done
            return unit
        self._fill(unit, cell, blocks, graded_block)
        self._cache[cache_key] = (unit.tokens, unit.tags, unit.prints, unit.reason, unit.shapes)
        return unit

    def _finish(self, unit: Unit, key: str, stmts, helpers) -> None:
        """Tokens, fingerprints and shape of ``stmts`` (the graded objects) into ``unit``."""
        shape_stmts, shape_helpers = copy.deepcopy((stmts, helpers))
        base = self._base_stmts[key]
        toks, tags, _ = self.norm.unit_tokens(stmts, copy.deepcopy(base), helpers)
        unit.tokens, unit.tags = toks, tags
        base_prints = self.release.base_tokens.get(key, set())
        unit.prints = {h: p for h, p in fingerprints(toks).items() if h not in base_prints}
        shape, _, _ = self.norm.unit_tokens(
            shape_stmts, copy.deepcopy(base), shape_helpers, structural=True
        )
        unit.shapes = set(fingerprints(shape)) - self.base_shapes.get(key, set())

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
            self._finish(unit, cell.key, graded_stmts, helpers)
        except Exception as error:  # noqa: BLE001 - one odd cell must not stop the report
            unit.reason = f"cannot be normalised ({type(error).__name__})"
            unit.tokens, unit.prints, unit.shapes = [], {}, set()
            return
        toks = unit.tokens
        if not toks:
            unit.reason = "no code of their own (the release's code only)"
        elif len(toks) < MIN_TOKENS:
            unit.reason = "too short to compare"

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
        # the answer key beside the hidden suite, and course_lib: same-named objects
        keys = sorted(self.course.suite_dir(self.assignment).glob("*_key.py"))
        for cell in self.release.cells:
            found = {f"key ({p.name})": v for p in keys for v in _sources([p], cell.names).values()}
            found.update((f"course_lib ({m})", v) for m, v in library_sources(cell.names).items())
            for owner, (blocks, helpers) in found.items():
                unit = Unit(owner, "reference", cell.key, [Block(owner, b) for b in blocks])
                stmts: list[ast.stmt] = []
                for i, src in enumerate(blocks):
                    part = ast.parse(src).body
                    _tag(part, i)
                    stmts.extend(part)
                self._finish(unit, cell.key, stmts, copy.deepcopy(helpers))
                refs[cell.key].append(unit)
        return refs

    def rewrites(self) -> dict[str, list[Unit]]:
        """The course's independent corpus (``autograder/samples/<name>/independent/*.yml``,
        correct variants written without the key) as background units, per cell: the default
        ``--background``."""
        import yaml

        out: dict[str, list[Unit]] = {}
        folder = self.course.samples_dir(self.assignment) / "independent"
        by_id = {c.grade_id: c for c in self.release.cells}
        for path in sorted(folder.glob("*.yml")) if folder.is_dir() else []:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            for variant, spec in data.items() if isinstance(data, dict) else ():
                cells = {g: c.get("code", "") for g, c in (spec.get("cells") or {}).items()
                         if isinstance(c, dict)}  # fmt: skip
                owner = f"background: {path.stem}/{variant}"
                for gid, code in cells.items():
                    cell = by_id.get(gid)
                    if cell is None:
                        continue
                    blocks = [(gid, code)] + [(g, c) for g, c in cells.items() if g != gid]
                    unit = self._unit(owner, "background", cell, blocks, 0)
                    if unit.comparable:
                        out.setdefault(cell.key, []).append(unit)
        return out


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


def _sources(paths: list[Path], names: list[str]) -> dict[str, tuple[list[str], dict]]:
    modules = {}
    for path in paths:
        source = path.read_text(encoding="utf-8")
        try:
            modules[path.name] = (source, ast.parse(source))
        except SyntaxError:
            continue
    return _objects(modules, names)


def library_sources(names: list[str]) -> dict[str, tuple[list[str], dict]]:
    """module -> (sources of the objects named ``names``, the module's functions as helpers).

    Read statically from the installed course_lib (what ``inspect.getsource`` would return),
    without importing torch."""
    return _objects(_library_modules(), names)


def _objects(modules: dict, names: list[str]) -> dict[str, tuple[list[str], dict]]:
    found: dict[str, tuple[list[str], dict]] = {}
    for module, (source, tree) in modules.items():
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
