"""nbgrader plug-ins that keep nbgrader's own commands on the course's grader.

``nbgrader_config.py`` installs both:

- :class:`CourseGrader` replaces stock ``nbgrader autograde`` (and formgrader's Autograde button).
  Stock autograding runs the hidden tests *in the student's kernel*, where a line of monkeypatching
  earns full marks; this preprocessor instead runs ``python -m autograder grade`` for the one
  student (sandboxed worker, trusted hidden suite), which writes the gradebook and the autograded
  notebook, and hands that notebook back to nbgrader, which has nothing left to execute.
- :class:`CourseCsvExport` is ``nbgrader export``'s plug-in: per student and assignment, the
  autograded points, the manual points (written answers and any override), lateness and the total.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
from nbconvert.preprocessors import Preprocessor
from nbgrader.plugins import ExportPlugin
from traitlets import Bool, Unicode

GRADE_SECONDS = 3600.0  # one student's `grade` (its own limits are far below)


class CourseGrader(Preprocessor):
    """Grade the submission with the course's sandboxed grader instead of the student's kernel."""

    enabled = Bool(True).tag(config=True)  # nbconvert's preprocessors are off by default
    course_root = Unicode("", help="the course folder (default: the working directory)").tag(
        config=True
    )

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        info = resources["nbgrader"]
        student, assignment = info["student"], info["assignment"]
        name = f"{info['notebook']}.ipynb"
        from autograder.integrations.gradebook import nbgrader_settings

        root = Path(self.course_root or Path.cwd()).resolve()
        settings = nbgrader_settings(root)
        submitted = Path(settings["submitted"]) / student / assignment
        out = root / "grading" / "autograder_single" / assignment / student
        self.log.info("grading %s/%s with the course grader (not in the kernel)", student, name)
        command = [
            sys.executable, "-m", "autograder", "--course-dir", str(root), "grade", assignment,
            "--submissions", str(submitted), "--student", student, "--jobs", "1", "--quiet",
            "--out", str(out),
        ]  # fmt: skip
        try:  # `grade` bounds itself; this bounds a grader that does not (never a hung autograde)
            done = subprocess.run(
                command, capture_output=True, text=True, cwd=root, timeout=GRADE_SECONDS
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"python -m autograder grade did not finish for {student} within "
                f"{GRADE_SECONDS:g} s (stopped)"
            ) from None
        if done.returncode != 0:
            raise RuntimeError(
                f"python -m autograder grade failed for {student}:\n{done.stdout}\n{done.stderr}"
            )
        self.log.info(done.stdout.strip())
        graded = Path(settings["autograded"]) / student / assignment / name
        return nbformat.read(graded, as_version=nbformat.NO_CONVERT), resources


def points(submission: Any) -> dict[str, float]:
    """Autograded and manual points of a gradebook submission (manual = no autograder score)."""
    auto = manual = auto_max = manual_max = 0.0
    for notebook in submission.notebooks:
        for grade in notebook.grades:
            if grade.auto_score is not None:
                auto += grade.score or 0.0
                auto_max += grade.max_score or 0.0
            else:
                manual += grade.score or 0.0
                manual_max += grade.max_score or 0.0
    return {"autograded": auto, "max_autograded": auto_max, "manual": manual,
            "max_manual": manual_max}  # fmt: skip


class CourseCsvExport(ExportPlugin):
    """``nbgrader export``: one row per student and assignment with autograded + manual points."""

    COLUMNS = ("assignment", "duedate", "timestamp", "seconds_late", "student_id", "last_name",
               "first_name", "email", "autograded", "max_autograded", "manual", "max_manual",
               "needs_manual_grade", "raw_score", "late_submission_penalty", "score",
               "max_score")  # fmt: skip

    def export(self, gradebook: Any) -> None:
        import csv

        from nbgrader.api import MissingEntry

        dest = self.to or "grades.csv"
        students = {str(s) for s in self.student}
        assignments = {str(a) for a in self.assignment}
        self.log.info("Exporting grades (autograded and manual points) to %s", dest)
        with open(dest, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.COLUMNS)
            writer.writeheader()
            for assignment in gradebook.assignments:
                if assignments and assignment.name not in assignments:
                    continue
                for student in gradebook.students:
                    if students and student.id not in students:
                        continue
                    row = {"assignment": assignment.name, "duedate": assignment.duedate or "",
                           "student_id": student.id, "last_name": student.last_name or "",
                           "first_name": student.first_name or "", "email": student.email or "",
                           "max_score": assignment.max_score}  # fmt: skip
                    try:
                        sub = gradebook.find_submission(assignment.name, student.id)
                    except MissingEntry:
                        row.update(timestamp="", seconds_late=0, autograded=0, manual=0,
                                   max_autograded="", max_manual="", needs_manual_grade="",
                                   raw_score=0, late_submission_penalty=0, score=0)  # fmt: skip
                    else:
                        penalty = sub.late_submission_penalty or 0.0
                        row.update(points(sub))
                        row.update(
                            timestamp=sub.timestamp or "",
                            seconds_late=sub.total_seconds_late or 0,
                            needs_manual_grade=bool(sub.needs_manual_grade),
                            raw_score=sub.score,
                            late_submission_penalty=penalty,
                            score=max(0.0, sub.score - penalty),
                        )
                    writer.writerow(row)
