"""Scores into nbgrader: the gradebook (by ``grade_id``) and the autograded notebooks.

After this, nbgrader's own tools work unchanged: ``nbgrader formgrader`` shows each submission
with its autograded scores (and lets graders score the written answers), ``nbgrader
generate_feedback`` renders the per-test report into each student's feedback, and ``nbgrader
export`` writes the grade table.

The autograded notebook is the *release* notebook with the student's answers in its solution
cells and, under each autograded grade cell, the hidden tests' names, points and messages: the
code it shows is exactly the code that was graded. Student text that nbconvert would render as
HTML (written answers, the summary's reasons and notes) is made inert first: no tag, entity or
``javascript:`` link written by a student reaches the feedback pages live.

Students are recorded under their row's ``id`` (a safe, unique folder name), rows of entries
that are not submissions are skipped, and one row that cannot be written does not stop the others.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import nbformat

from autograder.course.layout import Course
from autograder.course.notebook import clean_text
from autograder.host.report import hide_expected, md_text

_SCRIPT_URL = re.compile(r"(?i)\b(java|vb|live)(\s*)(script)(\s*):")


def inert_markdown(text: str) -> str:
    """Markdown written by a student, rendered as text: no HTML tag, no entity, no script URL."""
    text = clean_text(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SCRIPT_URL.sub(r"\1\3 :", text)


def nbgrader_settings(root: Path) -> dict[str, Any]:
    """course_id, db_url and folders from the course's ``nbgrader_config.py`` (or defaults)."""
    settings = {
        "course_id": "default_course",
        "db_url": f"sqlite:///{root / 'gradebook.db'}",
        "autograded": str(root / "autograded"),
        "submitted": str(root / "submitted"),
        "feedback": str(root / "feedback"),
        "downloaded": str(root / "downloaded"),
    }
    path = root / "nbgrader_config.py"
    if path.exists():
        from traitlets.config.loader import PyFileConfigLoader

        config = PyFileConfigLoader(path.name, path=str(root)).load_config()
        cd = config.get("CourseDirectory", {})
        base = Path(cd.get("root", root))
        settings["course_id"] = cd.get("course_id", settings["course_id"])
        settings["db_url"] = cd.get("db_url", f"sqlite:///{base / 'gradebook.db'}")
        for key, name in (
            ("autograded", "autograded_directory"),
            ("submitted", "submitted_directory"),
            ("feedback", "feedback_directory"),
        ):
            settings[key] = str(base / cd.get(name, key))
        zc = config.get("ZipCollectApp", {})
        settings["downloaded"] = str(base / zc.get("downloaded_directory", "downloaded"))
    return settings


def _ensure_assignment(course: Course, assignment: str, settings: dict) -> None:
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.preprocessors import SaveCells

    release = sorted(course.release_dir(assignment).glob("*.ipynb"))
    with Gradebook(settings["db_url"], settings["course_id"]) as gb:
        try:
            known = {nb.name for nb in gb.find_assignment(assignment).notebooks}
        except MissingEntry:
            gb.update_or_create_assignment(assignment)
            known = set()
    for path in release:
        if path.stem in known:
            continue
        resources = {
            "nbgrader": {
                "notebook": path.stem,
                "assignment": assignment,
                "db_url": settings["db_url"],
            }
        }
        SaveCells().preprocess(nbformat.read(path, as_version=4), resources)


def hold_back(course: Course, assignment: str) -> str | None:
    """Keep an assignment students do not have yet out of the gradebook: formgrader's overall
    score and ``nbgrader export`` count every assignment the gradebook holds. Removes it if it is
    there without submissions; returns what was done (or why not), ``None`` if nothing to do."""
    from nbgrader.api import Gradebook, MissingEntry

    settings = nbgrader_settings(course.root)
    db = settings["db_url"]
    if db.startswith("sqlite:///") and not Path(db.removeprefix("sqlite:///")).exists():
        return None  # no gradebook yet: nothing to keep it out of
    with Gradebook(db, settings["course_id"]) as gb:
        try:
            found = gb.find_assignment(assignment)
        except MissingEntry:
            return None
        if found.submissions:
            return (
                f"warning: {assignment} is unreleased in course.yml but the gradebook holds "
                f"{len(found.submissions)} submission(s) of it: kept (it counts in totals)"
            )
        gb.remove_assignment(assignment)
    return f"{assignment} is unreleased in course.yml: kept out of the gradebook (and totals)"


def autograded_notebook(release_path: Path, row: dict, student_cells: dict[str, str]) -> Any:
    nb = nbformat.read(release_path, as_version=4)
    nb = copy.deepcopy(nb)
    tests_by_cell: dict[str, list[dict]] = {}
    for result in row["tests"].values():
        tests_by_cell.setdefault(result["cell"], []).append(result)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id")
        if meta.get("solution") and gid in student_cells:
            answer = clean_text(student_cells[gid])
            cell.source = inert_markdown(answer) if cell.cell_type == "markdown" else answer
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            if meta.get("grade") and not meta.get("solution"):
                lines = []
                for result in tests_by_cell.get(gid, []):
                    mark = "passed" if result["status"] == "passed" else "FAILED"
                    lines.append(
                        f"{mark}  {result['nodeid']}  {result['points']:g}/{result['max_points']:g}"
                    )
                    message = clean_text(hide_expected(result["message"]))
                    lines += ["    " + m[:300] for m in message.splitlines()[:20]]
                if lines:
                    text = "Hidden tests for this cell:\n" + "\n".join(lines) + "\n"
                    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    summary = [f"**Autograder:** {row['score']:g} / {row['max_score']:g} autograded points."]
    if row["reason"]:
        summary.append(f"\n\n> {md_text(row['reason'])}")
    if row["notes"]:
        summary.append("\n\nNotes:\n" + "\n".join(f"- {md_text(n)}" for n in row["notes"][:20]))
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("".join(summary)))
    return nb


def record(course: Course, assignment: str, rows: list[dict], solutions: dict[str, dict]) -> int:
    """Write scores and autograded notebooks; ``solutions[student][grade_id]`` = cell source."""
    from nbgrader.api import Gradebook

    settings = nbgrader_settings(course.root)
    _ensure_assignment(course, assignment, settings)
    release = {p.name: p for p in sorted(course.release_dir(assignment).glob("*.ipynb"))}
    written = 0
    with Gradebook(settings["db_url"], settings["course_id"]) as gb:
        for row in rows:
            if row.get("submitted") is False:
                continue  # an entry of the folder that is not a submission
            student = row.get("id") or row["student"]
            try:
                _record_row(gb, assignment, student, row)
                answers = solutions.get(row["student"], {})
                for name, path in release.items():
                    nb = autograded_notebook(path, row, answers.get(name, {}))
                    folder = Path(settings["autograded"]) / student / assignment
                    folder.mkdir(parents=True, exist_ok=True)
                    with open(folder / name, "w", encoding="utf-8", errors="replace") as f:
                        nbformat.write(nb, f)
                written += 1
            except Exception as error:  # one row must not keep the others out of the gradebook
                gb.db.rollback()
                print(f"error: gradebook entry for {student!r} not written: {error}",
                      file=sys.stderr)  # fmt: skip
    return written


def _record_row(gb: Any, assignment: str, student: str, row: dict) -> None:
    from nbgrader.api import MissingEntry

    gb.update_or_create_student(student)
    try:
        gb.find_submission(assignment, student)
    except MissingEntry:
        gb.add_submission(assignment, student)
    for cell in row["cells"].values():
        stem = Path(cell["notebook"]).stem
        try:
            grade = gb.find_grade(cell["grade_id"], stem, assignment, student)
        except MissingEntry:
            continue
        grade.auto_score = float(cell["score"])
        grade.needs_manual_grade = grade.manual_score is not None
    gb.db.commit()
