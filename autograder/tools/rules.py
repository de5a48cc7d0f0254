"""``rules``: every rule the notebook states has a hidden test, or says it is not graded.

    python -m autograder rules a2_self_attention        # the table, problems, exit 1 on any

An assignment's rule table, ``autograder/suites/<name>/rules.yml``, quotes each rule the student
notebook states and names the hidden tests that grade it::

    - rule: "any number of leading batch dimensions"   # verbatim (whitespace-insensitive)
      tests: [test_bilinear_batch_dims]
      points: 1                                       # the sum of those tests' points
    - rule: "its floats are not graded"
      tests: []
      note: not graded (the notebook says so)

The quote is searched in the *student-facing* text: the release notebook's Markdown cells and the
comments and strings of its code cells (docstrings, error messages; the solutions are already
gone), whitespace normalised. A unit of that text (a Markdown sentence, a line of a docstring or a
comment) that holds a rule word
(``must``, ``raise``, ``default``, ``dtype``, ``any number of``) must overlap some quote, or say
"not graded" itself: a new rule in the text without a test fails ``check``. An entry without
tests needs a ``note`` saying why (``not graded`` with the notebook saying so, or ``prose``: the
sentence explains and states no rule of the code).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.course.layout import Course

RULE_WORDS = re.compile(r"\b(must|raises?|default|defaults|dtype|any number of)\b", re.IGNORECASE)
NOT_GRADED = re.compile(r"not graded", re.IGNORECASE)
BLOCK_BREAK = re.compile(r"\n\s*\n|\n(?=\s*(?:[-*+]|\d+[.)])\s)")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*$(\[_])")


@dataclass(frozen=True)
class Unit:
    """A piece of the student-facing text: a Markdown sentence or a code line."""

    start: int
    end: int
    text: str
    where: str


def normalise(text: str) -> str:
    return " ".join(text.split())


def prose_of_code(source: str) -> list[str]:
    """The comments and string literals of a code cell (docstrings, error messages), line by
    line: the rules a code cell states; the code itself (``dtype=torch.bool``) states none."""
    import io
    import tokenize

    out: list[str] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return [normalise(line) for line in source.splitlines()]
    for token in tokens:
        if token.type == tokenize.COMMENT:
            out.append(normalise(token.string.lstrip("#")))
        elif token.type == tokenize.STRING:
            out += [normalise(line) for line in token.string.splitlines()]
    return out


def student_text(release: Path) -> tuple[str, list[Unit]]:
    """The release notebook's text as one normalised string, and its units with their spans."""
    nb = nbformat.read(release, as_version=4)
    parts: list[str] = []
    units: list[Unit] = []
    offset = 0
    for cell in nb.cells:
        where = cell.get("id") or cell.cell_type
        if cell.cell_type == "markdown":  # paragraphs and list items, then sentences
            blocks = BLOCK_BREAK.split(cell.source)
            pieces = [p for block in blocks for p in SENTENCE_END.split(normalise(block))]
        elif cell.cell_type == "code":
            pieces = prose_of_code(cell.source)
        else:
            continue
        for piece in pieces:
            if not piece:
                continue
            units.append(Unit(offset, offset + len(piece), piece, where))
            parts.append(piece)
            offset += len(piece) + 1
    return " ".join(parts), units


def suite_points(suite: Path) -> dict[str, float]:
    """``test name -> points`` from the ``@pytest.mark.points(n, ...)`` decorators of the suite."""
    points: dict[str, float] = {}
    for path in sorted(suite.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test"):
                continue
            points[node.name] = 0.0
            for deco in node.decorator_list:
                if (
                    isinstance(deco, ast.Call)
                    and isinstance(deco.func, ast.Attribute)
                    and deco.func.attr == "points"
                    and deco.args
                    and isinstance(deco.args[0], ast.Constant)
                ):
                    points[node.name] = float(deco.args[0].value)
    return points


def load_rules(path: Path) -> list[dict]:
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    if not isinstance(data, list):
        raise ValueError(f"{path}: a list of entries (- rule: ..., tests: [...], points: n)")
    return data


def problems_and_table(course: Course, name: str) -> tuple[list[str], list[tuple]]:
    """What is wrong with ``name``'s rule table, and the table's rows (rule, tests, points)."""
    path = course.suite_dir(name) / "rules.yml"
    if not path.exists():
        return [f"{name}: no rule table {path} (see autograder/tools/rules.py)"], []
    release = course.release_dir(name) / f"{name}.ipynb"
    text, units = student_text(release)
    lowered = text.lower()
    points = suite_points(course.suite_dir(name))
    problems: list[str] = []
    rows: list[tuple] = []
    spans: list[tuple[int, int]] = []
    try:
        entries = load_rules(path)
    except ValueError as error:
        return [str(error)], []
    for i, entry in enumerate(entries):
        label = f"{path.name} entry {i + 1}"
        if not isinstance(entry, dict) or not isinstance(entry.get("rule"), str):
            problems.append(f"{label}: needs `rule: <quote>`")
            continue
        extra = set(entry) - {"rule", "tests", "points", "note"}
        if extra:
            problems.append(f"{label}: unknown keys {sorted(extra)} (rule, tests, points, note)")
        quote = normalise(entry["rule"]).lower()
        found = [m.start() for m in re.finditer(re.escape(quote), lowered)] if quote else []
        if not found:
            problems.append(f"{label}: {entry['rule']!r} is not in the student notebook {release}")
        spans += [(s, s + len(quote)) for s in found]
        tests = entry.get("tests") or []
        missing = [t for t in tests if t not in points]
        if missing:
            problems.append(f"{label}: no test {', '.join(missing)} in the hidden suite")
        total = sum(points.get(t, 0.0) for t in tests)
        if tests and abs(total - float(entry.get("points", -1))) > 1e-9:
            problems.append(
                f"{label}: points {entry.get('points')} but the tests {tests} are worth {total:g}"
            )
        if not tests and not entry.get("note"):
            problems.append(f"{label}: {entry['rule']!r} has no test: say why in `note:`")
        rows.append((entry["rule"], tests, total if tests else 0.0, entry.get("note", "")))
    for unit in units:
        if not RULE_WORDS.search(unit.text) or NOT_GRADED.search(unit.text):
            continue
        if not any(s < unit.end and unit.start < e for s, e in spans):
            problems.append(
                f"{name}: the notebook states a rule no entry of {path.name} quotes "
                f"(cell {unit.where}): {unit.text[:160]!r}"
            )
    return problems, rows


def print_table(name: str, rows: list[tuple]) -> None:
    print(f"rules {name}: {len(rows)} rules")
    for rule, tests, points, note in rows:
        graded = ", ".join(tests) if tests else f"(no test: {note})"
        print(f"  {points:>4g}  {normalise(rule)[:70]:<70}  {graded}")


def rules(course: Course, names: list[str]) -> int:
    status = 0
    for name in names:
        problems, rows = problems_and_table(course, name)
        print_table(name, rows)
        for problem in problems:
            print(f"  error: {problem}")
        status |= 1 if problems else 0
    return status
