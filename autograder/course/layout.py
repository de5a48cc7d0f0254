"""Where things live in a course folder (the layout ``nbgrader_config.py`` describes).

===========================================  ==============================================
``solutions/<assignment>/*.ipynb``           nbgrader source notebooks (with solutions)
``assignments/<assignment>/*.ipynb``         student release (generated; trusted when grading)
``autograder/suites/<assignment>/test_*.py``  hidden pytest suite
``autograder/samples/<assignment>/``         sample submissions + ``expected.json``
``grading/submitted/<student>/<assignment>``  collected submissions (nbgrader layout)
``grading/autograded/``, ``grading/feedback/``  nbgrader's autograded copies and feedback
``grading/gradebook.db``                     nbgrader's gradebook
===========================================  ==============================================
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autograder.course.notebook import Cell, cell_role, read_notebook

PACKAGE_ROOT = Path(__file__).resolve().parents[2]


class SetupError(Exception):
    """A problem with the course's files or a command's arguments, with what to do about it. The
    command line (:mod:`autograder.cli`) prints it as ``error: ...`` and exits with status 2;
    nothing below the command line exits."""


def find_course(path: str | Path | None = None) -> Path:
    """The course folder: ``path``, else the working directory if it looks like one, else ours."""
    if path is not None:
        root = Path(path).resolve()
        if not root.is_dir():
            raise SetupError(f"course folder {root} does not exist")
        return root
    cwd = Path.cwd()
    if (cwd / "nbgrader_config.py").exists() or (cwd / "autograder" / "suites").is_dir():
        return cwd.resolve()
    return PACKAGE_ROOT


@dataclass(frozen=True)
class GradeCell:
    grade_id: str
    notebook: str
    points: float
    autograded: bool  # a code cell that is not a solution: scored by the hidden suite


@dataclass(frozen=True)
class Course:
    root: Path

    def source_dir(self, assignment: str) -> Path:
        return self.root / "solutions" / assignment

    def release_dir(self, assignment: str) -> Path:
        return self.root / "assignments" / assignment

    def suite_dir(self, assignment: str) -> Path:
        return self.root / "autograder" / "suites" / assignment

    def samples_dir(self, assignment: str) -> Path:
        return self.root / "autograder" / "samples" / assignment

    @property
    def grading_dir(self) -> Path:
        return self.root / "grading"

    @property
    def submitted_dir(self) -> Path:
        return self.grading_dir / "submitted"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.grading_dir / 'gradebook.db'}"

    def release_notebooks(self, assignment: str) -> dict[str, list[Cell]]:
        """The release's notebooks (name -> cells); the trusted reference for grading."""
        folder = self.release_dir(assignment)
        paths = sorted(folder.glob("*.ipynb")) if folder.is_dir() else []
        if not paths:
            raise SetupError(
                f"no release notebooks in {folder}; run `python -m autograder release "
                f"{assignment}` (or `make release`) first"
            )
        return {p.name: read_notebook(p).cells for p in paths}

    def source_notebooks(self, assignment: str) -> list[Path]:
        folder = self.source_dir(assignment)
        return sorted(folder.glob("*.ipynb")) if folder.is_dir() else []

    def grade_cells(self, assignment: str) -> dict[tuple[str, str], GradeCell]:
        """(notebook, grade_id) -> grade cell, for every cell with points in the release."""
        cells = {}
        for name, nb_cells in self.release_notebooks(assignment).items():
            for cell in nb_cells:
                meta = cell.nbgrader
                if meta.get("grade") and meta.get("grade_id"):
                    autograded = cell.cell_type == "code" and cell_role(meta) == "grade"
                    cells[(name, meta["grade_id"])] = GradeCell(
                        meta["grade_id"], name, float(meta.get("points", 0) or 0), autograded
                    )
        return cells

    def hidden_paths(self, *extra: Path | None) -> list[str]:
        """Folders a worker must never read: hidden suites, solutions, submissions, outputs."""
        candidates = [
            self.root / "autograder" / "suites",
            self.root / "autograder" / "samples",
            self.root / "solutions",
            self.grading_dir,
            self.root / "tests",
            PACKAGE_ROOT / "autograder" / "suites",
            PACKAGE_ROOT / "autograder" / "samples",
            PACKAGE_ROOT / "solutions",
            PACKAGE_ROOT / "grading",
            PACKAGE_ROOT / "tests",
            PACKAGE_ROOT / "autograder_out",
            *[p for p in extra if p is not None],
        ]
        out: list[str] = []
        for path in candidates:
            resolved = str(Path(path).resolve())
            if resolved not in out:
                out.append(resolved)
        return out
