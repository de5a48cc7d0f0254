"""The rule tables: every rule an assignment's notebook states is graded, or says it is not.

``autograder/suites/<name>/rules.yml`` quotes each rule of the student notebook and names the
hidden tests that grade it (``autograder/tools/rules.py``); ``check`` fails on a problem.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from autograder.course.layout import Course
from autograder.tools.rules import problems_and_table

ROOT = Path(__file__).resolve().parents[2]
COURSE = Course(ROOT)
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").glob("a*_*") if p.is_dir())


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_every_stated_rule_has_a_test(name):
    problems, rows = problems_and_table(COURSE, name)
    assert not problems, "\n".join(problems)
    graded = [row for row in rows if row[1]]
    assert len(graded) >= 5, f"{name}: only {len(graded)} graded rules in rules.yml"


def copy_of(name: str, tmp_path: Path) -> Course:
    for part in (f"assignments/{name}", f"autograder/suites/{name}"):
        shutil.copytree(ROOT / part, tmp_path / part)
    return Course(tmp_path)


def test_a_new_rule_without_a_test_is_named(tmp_path):
    name = ASSIGNMENTS[0]
    course = copy_of(name, tmp_path)
    path = course.release_dir(name) / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("The hidden size must be a power of two."))
    nbformat.write(nb, path)
    problems, _ = problems_and_table(course, name)
    assert any("must be a power of two" in p for p in problems), problems
    # the same sentence marked as not graded is fine
    nb.cells[-1].source = "The hidden size must be a power of two (not graded)."
    nbformat.write(nb, path)
    problems, _ = problems_and_table(course, name)
    assert not any("power of two" in p for p in problems), problems


def test_a_quote_a_test_or_points_that_do_not_exist_are_named(tmp_path):
    name = ASSIGNMENTS[0]
    course = copy_of(name, tmp_path)
    rules = course.suite_dir(name) / "rules.yml"
    rules.write_text(
        rules.read_text(encoding="utf-8")
        + '- rule: "a sentence the notebook never says"\n  tests: [test_nowhere]\n  points: 3\n'
    )
    problems = "\n".join(problems_and_table(course, name)[0])
    assert "is not in the student notebook" in problems
    assert "no test test_nowhere" in problems
    assert "points 3" in problems
