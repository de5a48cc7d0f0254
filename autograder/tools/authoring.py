"""``build``: generate an assignment's nbgrader source notebook and its sample submissions from
its text source.

An assignment has one text source, ``solutions/<name>/<name>.md``: a jupytext MyST Markdown
notebook (open it in Jupyter with jupytext, or in any editor) holding the prose, the code and, in
each cell's options, its nbgrader role. From it this module writes, deterministically,

- ``solutions/<name>/<name>.ipynb``: the nbgrader source notebook (every cell's nbgrader
  metadata, cell ids), ruff-formatted and ruff-checked; ``python -m autograder release`` makes the
  student release from it;
- ``autograder/samples/<name>/<sample>.ipynb``: the sample submissions, each the reference
  solution with a few cells patched as ``autograder/samples/<name>/samples.yml`` says.

Cell options (``:kind:``, ``:grade_id:``, ``:points:`` in a code cell; the JSON after ``+++``
for a Markdown cell):

==============  ==========  ==================================================================
kind            cell        nbgrader role
==============  ==========  ==================================================================
``md``          Markdown    instructions, read-only (the default for a Markdown cell)
``provided``    code        set-up or experiment code students run but do not edit, read-only
``scratch``     code        code students may change, no metadata (the default for code)
``solution``    code        autograded answer: the body between ``### BEGIN SOLUTION`` and
                            ``### END SOLUTION`` is replaced by a stub in the release
``check``       code        the visible check of a graded step, with ``points``: the hidden
                            tests marked ``cell=<grade_id>`` must add up to them
                            (``python -m autograder check``)
``written``     Markdown    a manually graded answer with ``points``; the model answer sits
                            between the markers
==============  ==========  ==================================================================

Every cell but a scratch cell has a ``grade_id``, which is also its cell id; a scratch cell's id
is ``cell-<index>``. Points are declared once, here.

``samples.yml`` maps each sample to the cells it changes::

    partial:
      description: what is wrong and which points it should lose
      lint: false            # optional: a deliberately unparsable sample (own folder, no ruff)
      cells:
        layer_norm:          # a solution cell's grade_id
          code: |            # the whole cell, or
            ...
        encoder_block:
          replace:           # text replacements in the reference code (without the markers)
          - old: LayerNorm(d_model)
            new: nn.LayerNorm(d_model)

A patch whose cell is not a solution cell, or whose ``old`` text is not in the cell, is an error:
a sample never silently turns into the reference. Expected scores stay in ``expected.json``.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat

from autograder.course.layout import Course

KERNEL = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
KINDS = {
    # kind: (cell type, solution, grade, locked, has points)
    "md": ("markdown", False, False, True, False),
    "provided": ("code", False, False, True, False),
    "scratch": ("code", None, None, None, False),
    "solution": ("code", True, False, False, False),
    "check": ("code", False, True, True, True),
    "written": ("markdown", True, True, False, True),
}
OPTIONS = ("kind", "grade_id", "points")
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
FRONT_MATTER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: {display_name}
  language: {language}
  name: {name}
---
"""
RUFF_TOML = """# A sample with a syntax error on purpose: the grader must still grade the rest.
extend = "../../../../pyproject.toml"
extend-exclude = ["{name}.ipynb"]
"""


class AuthoringError(ValueError):
    """The text source or a sample patch is inconsistent."""


# --------------------------------------------------------------------------------------------
# text source <-> notebook
# --------------------------------------------------------------------------------------------


def source_path(course: Course, name: str) -> Path:
    return course.source_dir(name) / f"{name}.md"


def kind_of(cell: nbformat.NotebookNode) -> str:
    """The kind of a notebook cell, from its nbgrader metadata."""
    meta = cell.metadata.get("nbgrader")
    if meta is None:
        if cell.cell_type != "code":
            raise AuthoringError(f"cell {cell.get('id')}: a Markdown cell needs nbgrader metadata")
        return "scratch"
    flags = (cell.cell_type, meta["solution"], meta["grade"], meta["locked"], "points" in meta)
    for kind, spec in KINDS.items():
        if spec == flags:
            return kind
    raise AuthoringError(f"cell {cell.get('id')}: no kind has the nbgrader flags {flags}")


def _meta(kind: str, grade_id: str, points: float | None) -> dict:
    _, solution, grade, locked, _ = KINDS[kind]
    meta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": 3,
        "solution": solution,
        "task": False,
    }
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def to_notebook(text: str, where: str = "source") -> nbformat.NotebookNode:
    """The nbgrader notebook of a MyST text source (see the module's docstring)."""
    import jupytext

    parsed = jupytext.reads(text, fmt="md:myst")
    nb = nbformat.v4.new_notebook()
    kernel = dict(parsed.metadata.get("kernelspec") or KERNEL)
    nb.metadata = {"kernelspec": kernel, "language_info": {"name": "python"}}
    seen: set[str] = set()
    for index, cell in enumerate(parsed.cells):
        options = dict(cell.metadata)
        unknown = set(options) - set(OPTIONS)
        label = f"{where}: cell {index} ({options.get('grade_id', cell.source[:40])!r})"
        if unknown:
            raise AuthoringError(f"{label}: unknown options {sorted(unknown)} (use {OPTIONS})")
        kind = options.get("kind", "md" if cell.cell_type == "markdown" else "scratch")
        if kind not in KINDS:
            raise AuthoringError(f"{label}: unknown kind {kind!r} (one of {sorted(KINDS)})")
        cell_type, _, _, _, has_points = KINDS[kind]
        if cell.cell_type != cell_type:
            raise AuthoringError(f"{label}: a {kind} cell must be a {cell_type} cell")
        points = options.get("points")
        if has_points != (points is not None):
            raise AuthoringError(
                f"{label}: {kind} cells {'need' if has_points else 'have no'} points"
            )
        if points is not None and (isinstance(points, bool) or not isinstance(points, int | float)):
            raise AuthoringError(f"{label}: points must be a number, not {points!r}")
        grade_id = options.get("grade_id")
        if kind == "scratch":
            if grade_id is not None:
                raise AuthoringError(f"{label}: a scratch cell has no grade_id")
            cell_id = f"cell-{index}"
        elif not isinstance(grade_id, str) or not grade_id.replace("_", "a").isalnum():
            raise AuthoringError(f"{label}: needs a grade_id of letters, digits and _")
        else:
            cell_id = grade_id
        if cell_id in seen:
            raise AuthoringError(f"{label}: duplicate cell id / grade_id {cell_id!r}")
        seen.add(cell_id)
        if kind in ("solution", "written"):
            lines = [line.strip() for line in cell.source.split("\n")]
            if BEGIN not in lines or END not in lines:
                raise AuthoringError(f"{label}: no {BEGIN} ... {END} region")
        new = nbformat.v4.new_code_cell if cell_type == "code" else nbformat.v4.new_markdown_cell
        out = new(cell.source, id=cell_id)
        if kind != "scratch":
            out.metadata = _meta(kind, grade_id, points)
        nb.cells.append(out)
    nbformat.validate(nb)
    return nb


def to_text(nb: nbformat.NotebookNode) -> str:
    """The MyST text source of an nbgrader notebook (the inverse of :func:`to_notebook`)."""
    kernel = nb.metadata.get("kernelspec") or KERNEL
    parts = [FRONT_MATTER.format(**kernel)]
    for cell in nb.cells:
        kind = kind_of(cell)
        meta = cell.metadata.get("nbgrader", {})
        options = {}
        if kind not in ("md", "scratch"):
            options["kind"] = kind
        if kind != "scratch":
            options["grade_id"] = meta["grade_id"]
        if "points" in meta:
            options["points"] = meta["points"]
        if "```" in cell.source or "\n+++" in f"\n{cell.source}":
            raise AuthoringError(f"cell {cell.id}: ``` or +++ cannot appear in a MyST cell")
        if cell.cell_type == "markdown":
            parts.append(f"+++ {json.dumps(options)}\n\n{cell.source}\n")
        else:
            head = "".join(f":{k}: {json.dumps(v)}\n" for k, v in options.items())
            parts.append(f"```{{code-cell}} ipython3\n{head}{chr(10) if head else ''}"
                         f"{cell.source}\n```\n")  # fmt: skip
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------
# points: declared once (the cells' options), stated again in the prose
# --------------------------------------------------------------------------------------------

NUMBER = r"(\d+(?:\.\d+)?)"
PART = re.compile(rf"^(## (\d+)\. .*?\(){NUMBER}( points?)((?:, graded by hand)?\)\s*)$", re.M)
QUESTION = re.compile(rf"(\*\*Q\d+ \(){NUMBER}( points?)(\)\.?\*\*)")
ROW = re.compile(rf"^(\| (.+?) \| (hidden tests|by hand) \| ){NUMBER}( \|)$", re.M)
TOTAL = re.compile(rf"\*\*{NUMBER}\*\* \({NUMBER} automatic \+ {NUMBER} by hand\)")


def _points(value: float, unit: str) -> str:
    return f"{value:g}" + (unit.rstrip("s") if value == 1 else unit.rstrip("s") + "s")


def sync_points(nb: nbformat.NotebookNode) -> list[str]:
    """Restate the points of the check and written cells (their ``points`` option, the one
    declaration) wherever the prose states them: a part's heading ``## 3. Title (4 points)`` (the
    sum of its check cells; ``(6 points, graded by hand)``: of its written cells), a question's
    ``**Q1 (2 points).**`` (the written cell after it), and in the "What is graded" table the
    total line, each ``Qn`` row and each step row that is its part's only row. Changes the cells
    in place; returns what it changed (a points fix is one edit: the cell's ``points``)."""
    kinds = [kind_of(c) for c in nb.cells]
    auto: dict[int, float] = {}
    manual: dict[int, float] = {}
    part = 0
    for cell, kind in zip(nb.cells, kinds, strict=True):
        if cell.cell_type == "markdown":
            for match in re.finditer(r"^## (?:(\d+)\.)?", cell.source, re.M):
                part = int(match.group(1) or 0)  # an unnumbered heading ends the part
        points = cell.metadata.get("nbgrader", {}).get("points", 0)
        if kind == "check":
            auto[part] = auto.get(part, 0) + points
        elif kind == "written":
            manual[part] = manual.get(part, 0) + points
    written = [c.metadata["nbgrader"]["points"] for c, k in zip(nb.cells, kinds, strict=True)
               if k == "written"]  # fmt: skip
    changes: list[str] = []

    def put(cell: nbformat.NotebookNode, text: str) -> None:
        if text != cell.source:
            old = set(cell.source.splitlines())
            changes.extend(f"{cell.id}: {line}" for line in text.splitlines() if line not in old)
            cell.source = text

    for index, (cell, kind) in enumerate(zip(nb.cells, kinds, strict=True)):
        if cell.cell_type != "markdown" or kind == "written":
            continue

        def heading(m: re.Match) -> str:
            by_hand = "graded by hand" in m.group(5)
            value = (manual if by_hand else auto).get(int(m.group(2)), 0)
            if not value:
                return m.group(0)
            return f"{m.group(1)}{_points(value, m.group(4))}{m.group(5)}"

        def question(m: re.Match, index: int = index) -> str:
            after = [k for k in kinds[index + 1 :] if k in ("written", "check")]
            if not after or after[0] != "written":
                return m.group(0)
            mine = nb.cells[kinds.index("written", index + 1)].metadata["nbgrader"]["points"]
            return f"{m.group(1)}{_points(mine, m.group(3))}{m.group(4)}"

        text = QUESTION.sub(question, PART.sub(heading, cell.source))
        if "## What is graded" in text:
            steps = [re.match(r"(\d+)\.", m.group(2)) for m in ROW.finditer(text)]
            rows_of = [int(s.group(1)) for s in steps if s]

            def row(m: re.Match, rows_of: list[int] = rows_of) -> str:
                step, q = re.match(r"(\d+)\.", m.group(2)), re.match(r"Q(\d+)\b", m.group(2))
                value = None
                if m.group(3) == "hidden tests" and step and rows_of.count(int(step.group(1))) == 1:
                    value = auto.get(int(step.group(1)))
                elif m.group(3) == "by hand" and q and 0 < int(q.group(1)) <= len(written):
                    value = written[int(q.group(1)) - 1]
                return m.group(0) if not value else f"{m.group(1)}{value:g}{m.group(5)}"

            total_auto, total_manual = sum(auto.values()), sum(manual.values())
            text = TOTAL.sub(
                f"**{total_auto + total_manual:g}** ({total_auto:g} automatic + "
                f"{total_manual:g} by hand)",
                ROW.sub(row, text),
            )
        put(cell, text)
    return changes


def _check_table(nb: nbformat.NotebookNode, where: str) -> None:
    """The "What is graded" table's step rows add up to each part's check cells (a part with
    several rows is the one case :func:`sync_points` cannot restate: it names the part)."""
    table = next((c.source for c in nb.cells if "## What is graded" in c.source), "")
    rows: dict[int, float] = {}
    for m in ROW.finditer(table):
        step = re.match(r"(\d+)\.", m.group(2))
        if step and m.group(3) == "hidden tests":
            rows[int(step.group(1))] = rows.get(int(step.group(1)), 0) + float(m.group(4))
    auto: dict[int, float] = {}
    part = 0
    for cell in nb.cells:
        for match in re.finditer(r"^## (?:(\d+)\.)?", cell.source, re.M):
            part = int(match.group(1) or 0) if cell.cell_type == "markdown" else part
        if kind_of(cell) == "check":
            auto[part] = auto.get(part, 0) + cell.metadata["nbgrader"]["points"]
    wrong = [f"part {p}: the rows say {rows[p]:g}, its check cells {auto.get(p, 0):g}"
             for p in sorted(rows) if abs(rows[p] - auto.get(p, 0)) > 1e-9]  # fmt: skip
    if wrong:
        raise AuthoringError(
            f'{where}: the "What is graded" table disagrees with the cells\' points ('
            + "; ".join(wrong)
            + "): change the rows of that part"
        )


def notebook_text(nb: nbformat.NotebookNode) -> str:
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def _ruff(*args: str) -> subprocess.CompletedProcess:
    ruff = Path(sys.executable).parent / "ruff"
    return subprocess.run(
        [str(ruff) if ruff.exists() else "ruff", *args], capture_output=True, text=True
    )


def build_source(course: Course, name: str, *, write: bool = True) -> nbformat.NotebookNode:
    """Write ``solutions/<name>/<name>.ipynb`` from ``<name>.md`` (ruff-formatted; when ruff
    changes a code cell, the text source is rewritten with the formatted code)."""
    src = source_path(course, name)
    if not src.exists():
        raise AuthoringError(f"no text source {src}")
    text = src.read_text(encoding="utf-8")
    nb = to_notebook(text, str(src.relative_to(course.root)))
    path = course.source_dir(name) / f"{name}.ipynb"
    if not write:
        return nb
    changes = sync_points(nb)
    if changes:  # the cells' points are the declaration; the prose follows them
        src.write_text(to_text(nb), encoding="utf-8")
        print(f"restated the points in {src.relative_to(course.root)}:\n  " + "\n  ".join(changes))
    _check_table(nb, src.name)
    path.write_text(notebook_text(nb), encoding="utf-8")
    out = _ruff("format", "--quiet", str(path))
    if out.returncode != 0:
        raise AuthoringError(f"ruff format {path} failed:\n{out.stdout}{out.stderr}")
    formatted = nbformat.read(path, as_version=4)
    if [c.source for c in formatted.cells] != [c.source for c in nb.cells]:
        src.write_text(to_text(formatted), encoding="utf-8")
        print(f"reformatted the code of {src.relative_to(course.root)} (ruff format)")
        nb = to_notebook(src.read_text(encoding="utf-8"), str(src))
        path.write_text(notebook_text(nb), encoding="utf-8")
    out = _ruff("check", "--quiet", str(path))
    if out.returncode != 0:
        raise AuthoringError(f"ruff check {path} failed:\n{out.stdout}{out.stderr}")
    return nb


# --------------------------------------------------------------------------------------------
# samples
# --------------------------------------------------------------------------------------------


def unmark(code: str) -> str:
    """A solution cell without its BEGIN/END markers (what a correct student submits)."""
    return "\n".join(line for line in code.split("\n") if line.strip() not in (BEGIN, END))


def load_samples(course: Course, name: str) -> dict[str, dict]:
    import yaml

    path = course.samples_dir(name) / "samples.yml"
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise AuthoringError(f"{path}: a mapping of sample name -> patches")
    for sample, spec in data.items():
        if not isinstance(spec, dict) or set(spec) - {"description", "lint", "cells"}:
            raise AuthoringError(f"{path}: {sample}: keys description, lint, cells")
    return data


def apply_patch(code: str, patch: dict, label: str) -> str:
    """One cell's patch (``code`` or ``replace``) applied to the reference code."""
    if not isinstance(patch, dict) or len(set(patch) & {"code", "replace"}) != 1:
        raise AuthoringError(f"{label}: a patch has either code or replace")
    if set(patch) - {"code", "replace"}:
        raise AuthoringError(f"{label}: unknown keys {sorted(set(patch) - {'code', 'replace'})}")
    if "code" in patch:
        return patch["code"].strip("\n")
    for step in patch["replace"]:
        old, new = step.get("old"), step.get("new")
        if not isinstance(old, str) or not isinstance(new, str) or not old:
            raise AuthoringError(f"{label}: each replacement has a non-empty old and a new")
        if old not in code:
            raise AuthoringError(f"{label}: the text to replace is no longer in the cell:\n{old}")
        code = code.replace(old, new)
    return code


def submission(nb: nbformat.NotebookNode, cells: dict, label: str) -> nbformat.NotebookNode:
    """A sample submission: every solution cell holds the reference code without markers,
    except the patched cells."""
    out = copy.deepcopy(nb)
    todo = dict(cells or {})
    for cell in out.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            cell.source = unmark(cell.source)
            gid = meta["grade_id"]
            if gid in todo:
                cell.source = apply_patch(cell.source, todo.pop(gid), f"{label}: {gid}")
    if todo:
        raise AuthoringError(f"{label}: no solution cells named {sorted(todo)}")
    return out


def build_samples(course: Course, name: str, nb: nbformat.NotebookNode) -> list[Path]:
    folder = course.samples_dir(name)
    written = []
    formatted = []
    for sample, spec in load_samples(course, name).items():
        sub = submission(nb, spec.get("cells") or {}, f"samples.yml: {sample}")
        if spec.get("lint", True):
            path = folder / f"{sample}.ipynb"
            formatted.append(path)
        else:  # in its own folder, next to a ruff.toml that keeps the linter away from it
            path = folder / sample / f"{name}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            (path.parent / "ruff.toml").write_text(RUFF_TOML.format(name=name), encoding="utf-8")
        path.write_text(notebook_text(sub), encoding="utf-8")
        written.append(path)
    if formatted:
        for args in (("format", "--quiet"), ("check", "--quiet")):
            out = _ruff(*args, *map(str, formatted))
            if out.returncode != 0:
                raise AuthoringError(f"ruff {args[0]} of the samples failed:\n{out.stdout}")
    expected = folder / "expected.json"
    if written and expected.exists():
        names = set(json.loads(expected.read_text(encoding="utf-8"))) - {"reference", "blank"}
        if names != set(load_samples(course, name)):
            raise AuthoringError(f"{expected} lists {sorted(names)}, samples.yml other samples")
    return written


def build(course: Course, names: list[str]) -> int:
    status = 0
    for name in names:
        try:
            nb = build_source(course, name)
            samples = build_samples(course, name, nb)
        except AuthoringError as error:
            print(f"error: {name}: {error}", file=sys.stderr)
            status = 1
            continue
        auto = sum(
            c.metadata["nbgrader"].get("points", 0) for c in nb.cells if kind_of(c) == "check"
        )
        manual = sum(
            c.metadata["nbgrader"].get("points", 0) for c in nb.cells if kind_of(c) == "written"
        )
        print(
            f"built {name}: {auto:g} automatic + {manual:g} manual points; "
            f"{len(samples)} sample(s) in {course.samples_dir(name).relative_to(course.root)}"
        )
    return status
