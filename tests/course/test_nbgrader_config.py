"""The course's nbgrader configuration works: solutions/ is the source, assignments/ the release."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import nbformat
import time_limits

REPO = Path(__file__).resolve().parents[2]


def _tiny_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    solution = nbformat.v4.new_code_cell(
        "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n"
    )
    solution.metadata["nbgrader"] = {
        "grade": False,
        "solution": True,
        "locked": False,
        "grade_id": "double",
        "schema_version": 3,
    }
    check = nbformat.v4.new_code_cell("assert double(2) == 4")
    check.metadata["nbgrader"] = {
        "grade": True,
        "solution": False,
        "locked": True,
        "grade_id": "check_double",
        "points": 1,
        "schema_version": 3,
    }
    nb.cells = [nbformat.v4.new_markdown_cell("# Tiny"), solution, check]
    return nb


def test_generate_assignment_with_course_config(tmp_path):
    shutil.copy(REPO / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    source = tmp_path / "solutions" / "tiny"
    source.mkdir(parents=True)
    nbformat.write(_tiny_notebook(), source / "tiny.ipynb")

    # nbgrader runs `alembic` from PATH to create the gradebook: put the venv's bin first.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    out = time_limits.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", "tiny", "--force"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        cpu=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr

    released = tmp_path / "assignments" / "tiny" / "tiny.ipynb"
    assert released.exists(), (
        f"release not written where expected; tree: {sorted(tmp_path.rglob('*'))}"
    )
    text = released.read_text()
    assert "return 2 * x" not in text, "solution code leaked into the release"
    assert "raise NotImplementedError()" in text
    assert (tmp_path / "grading" / "gradebook.db").exists(), "gradebook must live under grading/"
    assert not (tmp_path / "gradebook.db").exists()


def test_feedback_pages_typeset_math_offline(tmp_path):
    """nbgrader's feedback template loads MathJax 2 from a CDN (raw ``$...$`` offline); with the
    course's config the page carries the book's offline MathJax 3, configured for ``$...$``."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    shutil.copy(REPO / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(tmp_path)).load_config()
    converter = GenerateFeedback(coursedir=CourseDirectory(config=cfg), config=cfg)
    exporter = HTMLExporter(parent=converter, config=converter.config)  # as its start() does
    assert exporter.template_name == "feedback"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(r"Scores are $q k^\top / \sqrt{D}$.")]
    resources = {"nbgrader": {"notebook": "a", "score": 1, "max_score": 2, "late_penalty": 0}}
    html, _ = exporter.from_notebook_node(nb, resources=resources)
    assert "cdnjs" not in html and "mathjax@" not in html.lower(), "a CDN in the feedback page"
    assert "window.MathJax = {tex: {inlineMath: [['$', '$']" in html
    assert "MathJax 3, inline" in html and len(html) > 1_000_000  # the script itself, inlined
    assert r"$q k^\top / \sqrt{D}$" in html
