"""``release``: regenerate ``assignments/<name>/`` from ``solutions/<name>/`` with nbgrader.

nbgrader's ``generate_assignment`` does the work (it also records the assignment's cells in the
gradebook, unless ``course.yml`` lists the assignment as ``unreleased``: formgrader's overall score
and ``nbgrader export`` total every assignment the gradebook holds, so one students do not have
yet stays out of it until it is released); afterwards every released notebook is rewritten in
one canonical form (no outputs, no execution counts, no editor state, sorted keys, one trailing
newline) so that regenerating gives the same bytes and a test can compare the committed release
with a fresh one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat

from autograder.course.embargo import handed_out
from autograder.course.layout import Course

VOLATILE_CELL_METADATA = ("execution", "collapsed", "scrolled", "ExecuteTime", "jupyter", "tags")
VOLATILE_NOTEBOOK_METADATA = ("widgets", "toc", "varInspector", "celltoolbar")


def normalise(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for key in VOLATILE_NOTEBOOK_METADATA:
        nb.metadata.pop(key, None)
    for cell in nb.cells:
        for key in VOLATILE_CELL_METADATA:
            if key != "tags" or not cell.metadata.get("tags"):
                cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    text = nbformat.writes(nb)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def nbgrader_env() -> dict[str, str]:
    """nbgrader runs ``alembic`` from PATH: put this interpreter's folder first."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def release(course: Course, names: list[str]) -> int:
    from autograder.tools.authoring import build, source_path

    status = 0
    for name in names:
        source = course.source_dir(name)
        # the source notebook and the samples are generated from the text source, if there is one
        if source_path(course, name).exists() and build(course, [name]) != 0:
            status = 1
            continue
        if not any(source.glob("*.ipynb")):
            print(f"error: no source notebooks in {source}", file=sys.stderr)
            status = 1
            continue
        held = not handed_out(course.root, name)  # unreleased: kept out of the gradebook
        out = subprocess.run(
            [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force"]
            + (["--no-db"] if held else []),
            cwd=course.root,
            env=nbgrader_env(),
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            print(f"error: nbgrader generate_assignment {name} failed:", file=sys.stderr)
            print(out.stdout[-3000:] + out.stderr[-3000:], file=sys.stderr)
            status = 1
            continue
        if held:
            from autograder.integrations.gradebook import hold_back

            said = hold_back(course, name)
            if said:
                print(said, file=sys.stderr if said.startswith("warning") else sys.stdout)
        released = sorted(course.release_dir(name).glob("*.ipynb"))
        for path in released:
            normalise(path)
        problems = leaks(course, name)
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        status = status or int(bool(problems))
        print(f"released {name}: {len(released)} notebook(s) in {course.release_dir(name)}")
    return status


def leaks(course: Course, name: str) -> list[str]:
    """Solution markers or hidden-suite files in the release."""
    problems = []
    release = course.release_dir(name)
    for path in sorted(release.rglob("*")):
        if not path.is_file():
            continue
        if path.name.startswith("test_") and path.suffix == ".py":
            problems.append(f"{path} looks like a test file in the release")
        if path.suffix in (".ipynb", ".md", ".py", ".txt"):
            text = path.read_text(encoding="utf-8", errors="replace")
            for marker in ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"):
                if marker in text:
                    problems.append(f"{path} contains {marker!r}")
    return problems
