"""Helpers that build the assignments' nbgrader source notebooks from Python (one place for the
cell metadata, so every notebook is consistent and regenerating one gives the same bytes).

Cell kinds (nbgrader's names in brackets):

- ``md(text)``: instructions [read-only markdown];
- ``provided(code, gid)``: set-up or experiment code students run but do not edit [read-only];
- ``scratch(code)``: code students may change (training settings, experiments) [no metadata];
- ``solution(code, gid)``: a function or module whose body is between ``### BEGIN SOLUTION`` and
  ``### END SOLUTION`` [autograded answer];
- ``check(code, gid, points)``: the visible check of a graded step; its points come from the
  hidden suite's tests marked ``cell=gid`` [autograder tests];
- ``written(question, answer, gid, points)``: a question for a human grader [manually graded
  answer].

This folder is not an assignment (``make release`` only picks ``solutions/a*_*``) and is never
released.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat

KERNEL = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


class Builder:
    """Collects cells in order; ``write(path)`` saves the notebook."""

    def __init__(self) -> None:
        self.cells: list[nbformat.NotebookNode] = []
        self.ids: set[str] = set()
        self.points: dict[str, tuple[str, float]] = {}

    def _id(self, gid: str | None) -> str:
        base = gid or f"cell-{len(self.cells)}"
        if base in self.ids:
            raise ValueError(f"duplicate cell id / grade_id {base!r}")
        self.ids.add(base)
        return base

    @staticmethod
    def _meta(gid: str, *, solution: bool, grade: bool, locked: bool, points: float | None):
        meta = {
            "grade": grade,
            "grade_id": gid,
            "locked": locked,
            "schema_version": 3,
            "solution": solution,
            "task": False,
        }
        if points is not None:
            meta["points"] = points
        return {"nbgrader": meta}

    def md(self, text: str, gid: str | None = None) -> None:
        gid = self._id(gid)
        cell = nbformat.v4.new_markdown_cell(_clean(text), id=gid)
        cell.metadata = self._meta(gid, solution=False, grade=False, locked=True, points=None)
        self.cells.append(cell)

    def provided(self, code: str, gid: str) -> None:
        gid = self._id(gid)
        cell = nbformat.v4.new_code_cell(_clean(code), id=gid)
        cell.metadata = self._meta(gid, solution=False, grade=False, locked=True, points=None)
        self.cells.append(cell)

    def scratch(self, code: str) -> None:
        cell = nbformat.v4.new_code_cell(_clean(code), id=self._id(None))
        self.cells.append(cell)

    def solution(self, code: str, gid: str) -> None:
        text = _clean(code)
        if "### BEGIN SOLUTION" not in text or "### END SOLUTION" not in text:
            raise ValueError(f"solution cell {gid!r} has no BEGIN/END SOLUTION region")
        gid = self._id(gid)
        cell = nbformat.v4.new_code_cell(text, id=gid)
        cell.metadata = self._meta(gid, solution=True, grade=False, locked=False, points=None)
        self.cells.append(cell)

    def check(self, code: str, gid: str, points: float) -> None:
        gid = self._id(gid)
        cell = nbformat.v4.new_code_cell(_clean(code), id=gid)
        cell.metadata = self._meta(gid, solution=False, grade=True, locked=True, points=points)
        self.cells.append(cell)
        self.points[gid] = ("auto", points)

    def written(self, question: str, answer: str, gid: str, points: float) -> None:
        self.md(question, gid=f"{gid}_question")
        gid = self._id(gid)
        text = "### BEGIN SOLUTION\n" + _clean(answer) + "\n### END SOLUTION"
        cell = nbformat.v4.new_markdown_cell(text, id=gid)
        cell.metadata = self._meta(gid, solution=True, grade=True, locked=False, points=points)
        self.cells.append(cell)
        self.points[gid] = ("manual", points)

    def totals(self) -> tuple[float, float]:
        auto = sum(p for kind, p in self.points.values() if kind == "auto")
        manual = sum(p for kind, p in self.points.values() if kind == "manual")
        return auto, manual

    def notebook(self) -> nbformat.NotebookNode:
        nb = nbformat.v4.new_notebook()
        nb.cells = self.cells
        nb.metadata = {"kernelspec": KERNEL, "language_info": {"name": "python"}}
        return nb

    def write(self, path: Path) -> None:
        nb = self.notebook()
        nbformat.validate(nb)
        text = nbformat.writes(nb)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def _clean(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def strip_solution(code: str, replacement: str) -> str:
    """Replace every ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region of ``code`` with
    ``replacement`` (indented like the region), as a student's submission would read."""
    lines = _clean(code).split("\n")
    out: list[str] = []
    inside = False
    for line in lines:
        stripped = line.strip()
        if stripped == "### BEGIN SOLUTION":
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.extend(indent + r if r else "" for r in _clean(replacement).split("\n"))
            continue
        if stripped == "### END SOLUTION":
            inside = False
            continue
        if not inside:
            out.append(line)
    return "\n".join(out)


def unmark(code: str) -> str:
    """The solution code without its BEGIN/END markers (what a correct student would submit)."""
    return "\n".join(
        line
        for line in _clean(code).split("\n")
        if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
    )


def submission(builder: Builder, overrides: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """A student's submission built from the source: every solution cell holds the reference
    code without markers, except the cells named in ``overrides`` (grade_id -> full cell code)."""
    import copy

    overrides = dict(overrides or {})
    nb = copy.deepcopy(builder.notebook())
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id")
        if meta.get("solution"):
            cell.source = _clean(overrides.pop(gid)) if gid in overrides else unmark(cell.source)
    if overrides:
        raise ValueError(f"no solution cells named {sorted(overrides)}")
    return nb


def write_notebook(nb: nbformat.NotebookNode, path: Path) -> None:
    nbformat.validate(nb)
    text = nbformat.writes(nb)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
