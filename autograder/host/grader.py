"""Grading a batch of submissions: discover, prepare (trusted, no execution), run, aggregate.

:class:`Grader` starts ``jobs`` runners (:mod:`autograder.host.runner`), asks one for the suite's
manifest, then hands each prepared submission to the next free runner. Every submission gets a
row, whatever is wrong with it: a reason, its files' SHA-256, per-test points and messages.
Anything that goes wrong with one submission (an unreadable file, a bug this file's code has not
met yet, a runner that died) becomes that submission's row, with ``fault`` saying whose fault it
is ("student" or "grader"); the other submissions are graded as usual. Rows are handed to
``on_row`` as soon as each is graded, so the outputs never wait for the whole batch.

The records (:class:`Row`, :class:`TestResult`, :class:`CellScore`) are dataclasses;
``Grader.grade`` returns them as plain dicts (``Row.to_dict()``), the shape of ``report.json``.
"""

from __future__ import annotations

import copy
import json
import stat
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autograder.course.layout import Course, SetupError
from autograder.course.notebook import (
    Cell,
    NotebookError,
    assemble,
    clean_text,
    extract,
    oversized,
    read_notebook,
    review,
    sha256_file,
)
from autograder.host.intake import Submission, safe_name
from autograder.host.options import Options
from autograder.host.pool import RunnerPool, Runners
from autograder.host.scan import scan


@dataclass
class TestResult:
    nodeid: str
    cell: str | None
    max_points: float
    points: float
    status: str  # "passed" or "failed"
    message: str = ""
    output: str = ""
    seconds: float = 0.0  # what the test cost (setup, call, teardown): where grading time goes

    @classmethod
    def from_dict(cls, data: dict) -> TestResult:
        """A result line written by the grading process, its types checked."""

        def num(x: Any) -> float:
            return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else 0.0

        def text(x: Any) -> str:
            return clean_text(x) if isinstance(x, str) else ""

        status = "passed" if data.get("status") == "passed" else "failed"
        return cls(
            nodeid=text(data.get("nodeid")),
            cell=data.get("cell") if isinstance(data.get("cell"), str) else None,
            max_points=num(data.get("max_points")),
            points=num(data.get("points")) if status == "passed" else 0.0,
            status=status,
            message=text(data.get("message")),
            output=text(data.get("output")),
            seconds=num(data.get("seconds")),
        )


@dataclass
class CellScore:
    notebook: str
    grade_id: str | None
    score: float = 0.0
    max_score: float = 0.0


@dataclass
class Row:
    """One submission's grade: what report.json, grades.csv and feedback are written from."""

    student: str
    id: str  # the student's output folder name (unique in the batch, safe on any filesystem)
    status: str = "graded"  # "graded", "error" (nothing could be graded) or "skipped"
    reason: str | None = None
    fault: str | None = None  # None, "student" (the submission) or "grader" (a grader fault)
    submitted: bool = True
    files: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # for the instructor: extra cells, ...
    notebooks: dict[str, dict] = field(default_factory=dict)
    answers: dict[str, dict[str, str]] = field(default_factory=dict)
    tests: dict[str, TestResult] = field(default_factory=dict)
    cells: dict[str, CellScore] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)
    score: float = 0.0
    max_score: float = 0.0
    percent: float = 0.0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def prepare(sub: Submission, release: dict[str, list[Cell]]) -> tuple[dict, Row]:
    """Return (task for the runner, row skeleton)."""
    row = Row(student=sub.student, id=sub.id, notes=list(sub.notes), submitted=sub.submitted)
    for path in sub.files:
        try:
            rel = str(path.relative_to(sub.base))
        except ValueError:
            rel = path.name
        try:
            if not stat.S_ISREG(path.lstat().st_mode):
                raise OSError("not a regular file")
            row.files.append(
                {"path": rel, "sha256": sha256_file(path), "size": path.lstat().st_size}
            )
        except OSError as error:
            row.files.append({"path": rel, "error": str(error)})
    task: dict[str, Any] = {"student": sub.student, "notebooks": {}}
    reasons = []
    if sub.error:
        reasons.append(sub.error)
    for name, path in sub.notebooks.items():
        if sub.error:
            break
        if path is None:
            found = ", ".join(p.name for p in sub.files[:5])
            reasons.append(
                f"missing: {name} was not submitted" + (f" (found: {found})" if found else "")
            )
            continue
        try:
            read = read_notebook(path)
        except NotebookError as error:
            reasons.append(str(error))
            continue
        row.notebooks[name] = {"file": path.name, "sha256": read.sha256}
        answers = row.answers.setdefault(name, {})
        kinds = {c.nbgrader.get("grade_id"): c.cell_type for c in release[name]}
        for cell in read.cells:  # the first copy of each, if its type is the release's
            gid = cell.nbgrader.get("grade_id")
            if gid and gid not in answers and cell.nbgrader.get("solution"):
                answers[gid] = cell.source if kinds.get(gid) == cell.cell_type else None
        for gid in [g for g, source in answers.items() if source is None]:
            del answers[gid]  # not graded: the autograded notebook keeps the release's cell
        chunks, notes = assemble(read.cells, release[name])
        notes = read.notes + notes
        row.flags.extend(f"{name}: {f}" if len(release) > 1 else f for f in review(
            read.cells, release[name]))  # fmt: skip
        too_big = oversized(chunks)
        if too_big:
            reasons.append(f"{name}: {too_big}; it was not graded")
            row.answers.pop(name, None)
            continue
        extracted = []
        for chunk in chunks:
            ex, more = extract(chunk)
            notes.extend(more)
            if ex is not None:
                extracted.append(ex)
        result = scan(extracted)
        task["notebooks"][name] = {
            "chunks": [(e.label, e.source, e.keep) for e in extracted],
            # the release's own cells: what fails to load there is the instructor's business
            "provided": [e.label for e in extracted if e.origin == "release"],
            "scan": {
                "references": [r.__dict__ for r in result.references],
                "tampering": result.tampering,
            },
        }
        row.notes.extend(f"{name}: {n}" if len(release) > 1 else n for n in notes)
    if reasons:
        row.reason = "; ".join(reasons)
        row.fault = "student" if sub.submitted else None
        if not task["notebooks"]:
            row.status = "error" if sub.submitted else "skipped"  # skipped: no submission at all
    return task, row


GRADER_PACKAGE = Path(__file__).resolve().parents[1]  # autograder/


class GraderModified(SetupError):
    """The grader's own files changed after student code started to run: nothing is written."""


class OwnFiles:
    """The SHA-256 of the grader's own files, taken before any student code runs: every ``.py``
    of the ``autograder`` package (its suites and samples aside) and every file of the hidden
    suite. :meth:`verify` is called before results are written (each row, and after grading,
    before any module the grader imports late): a shared mapping or a write that changed one of
    them (a module imported after grading included) produces no results. Bytecode caches are
    kept out of it by the command layer (``sys.pycache_prefix`` in a private folder)."""

    def __init__(self, suite: Path, package: Path = GRADER_PACKAGE):
        self.package, self.suite = package, suite
        self.table = self._digest()

    def _files(self) -> list[Path]:
        skip = {self.package / "suites", self.package / "samples"}
        code = [
            p
            for p in self.package.rglob("*.py")
            if not any(parent in skip for parent in p.parents) and "__pycache__" not in p.parts
        ]
        suite = [
            p for p in self.suite.rglob("*") if "__pycache__" not in p.parts and not p.is_dir()
        ]
        return sorted({*code, *suite})

    def _digest(self) -> dict[str, str]:
        table = {}
        for path in self._files():
            try:
                table[str(path)] = sha256_file(path)
            except OSError as error:
                table[str(path)] = f"unreadable: {error.strerror}"
        return table

    def verify(self) -> None:
        now = self._digest()
        if now == self.table:
            return
        changed = sorted(k for k in {*now, *self.table} if now.get(k) != self.table.get(k))
        shown = ", ".join(changed[:5]) + (
            f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        )
        raise GraderModified(
            f"the grader's own files changed while student code was running ({shown}): a "
            "submission may have written to them, so no results are written; restore the grader "
            "(e.g. `git status`, `git checkout`) and grade again"
        )


class Grader:
    """Grades submissions of one assignment; use as a context manager. Pass ``runners`` to share
    warm runners between assignments (their hidden folders must then cover every suite)."""

    def __init__(
        self,
        course: Course,
        assignment: str,
        options: Options | None = None,
        *,
        suite: Path | None = None,
        hide: list[Path] | None = None,
        runners: Runners | None = None,
    ):
        self.course, self.assignment = course, assignment
        self.options = options or Options()
        self.suite = Path(suite or course.suite_dir(assignment)).resolve()
        if not self.suite.is_dir():
            raise SetupError(f"no hidden suite for {assignment!r} at {self.suite}")
        self.release = course.release_notebooks(assignment)
        self.grade_cells = course.grade_cells(assignment)
        self.hide = list(hide or [])
        self.shared = runners
        self.runners: Runners | None = runners
        self.manifest: dict = {}

    @property
    def pool(self) -> RunnerPool | None:
        return self.runners.pool if self.runners else None

    @property
    def run_dir(self) -> Path | None:
        return self.runners.run_dir if self.runners else None

    def __enter__(self) -> Grader:
        self.own_files = OwnFiles(self.suite)  # before any student code runs
        if self.shared is None:
            self.runners = Runners(self.course, self.options, [self.suite, *self.hide]).__enter__()
        try:
            self._collect()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _collect(self) -> None:
        manifest_path = self.run_dir / f"{self.assignment}.manifest.json"
        reply = self.pool.call(
            {"op": "collect", "suite": str(self.suite), "manifest": str(manifest_path)}
        )
        if not manifest_path.exists():
            raise RuntimeError(f"collecting the hidden suite failed: {reply}\n{self.runners.log()}")
        self.manifest = json.loads(manifest_path.read_text())
        if self.manifest["errors"]:
            raise SetupError(
                "the hidden suite has problems:\n  " + "\n  ".join(self.manifest["errors"])
            )
        if not self.manifest["tests"]:
            raise SetupError(f"the hidden suite {self.suite} has no tests")

    def __exit__(self, *exc: Any) -> None:
        if self.shared is None and self.runners is not None:
            self.runners.__exit__()
            self.runners = None

    @property
    def sandbox_report(self) -> dict:
        return self.pool.report if self.pool else {}

    @property
    def tests(self) -> list[dict]:
        return self.manifest["tests"]

    def grade(
        self,
        submissions: list[Submission],
        on_row: Callable[[dict], None] | None = None,
        *,
        names: list[str] | None = None,
    ) -> list[dict]:
        """One row (a dict, see :class:`Row`) per submission, in order. ``on_row`` receives
        each row as soon as it is graded (calls are serialised).

        With ``names`` (the tools': ``mutants``, ``fairness``), each submission is graded as if
        each of these students had submitted it: one row per submission and name, submission
        by submission. The submission is read, extracted and scanned once and its suite
        collected once; each name's tests run in a process forked from that state, with a worker
        of its own, so each row is what grading under that name alone gives."""
        per = 1 if names is None else len(names)
        rows: list[dict | None] = [None] * (len(submissions) * per)
        bar = None
        if self.options.progress and len(rows) > 1:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(rows), desc=f"grading {self.assignment}", unit="sub")
        lock = threading.Lock()

        def work(index: int) -> None:
            graded = self._grade_safely(submissions[index], index, names)
            rows[index * per : (index + 1) * per] = graded
            with lock:
                for row in graded:
                    if on_row is not None:
                        on_row(row)
                    if bar is not None:
                        bar.update(1)

        with ThreadPoolExecutor(max_workers=max(1, self.options.jobs)) as pool:
            list(pool.map(work, range(len(submissions))))
        if bar is not None:
            bar.close()
        return [r for r in rows if r is not None]

    def _grade_safely(self, sub: Submission, index: int, names: list[str] | None) -> list[dict]:
        """``_grade_one``, or rows that say what went wrong in the grader."""
        start = time.monotonic()
        try:
            return [_clean(row.to_dict()) for row in self._grade_one(sub, index, names)]
        except Exception as error:  # a grader bug must cost one submission, not the batch
            detail = "".join(traceback.format_exception_only(type(error), error)).strip()
            sys.stderr.write(
                f"grader fault on {sub.student!r}:\n{traceback.format_exc()}"[-4000:] + "\n"
            )
            rows = []
            for student, id_ in _identities(sub, names):
                row = Row(
                    student=student,
                    id=id_,
                    status="error",
                    fault="grader",
                    submitted=sub.submitted,
                    reason=f"grader fault while grading this submission: {detail[:300]}",
                )
                row.tests = self._zero_tests(row.reason)
                row.cells = self._cells(row.tests)
                row.max_score = round(sum(c.max_score for c in row.cells.values()), 6)
                row.seconds = round(time.monotonic() - start, 3)
                rows.append(_clean(row.to_dict()))
            return rows

    def _zero_tests(self, why: str) -> dict[str, TestResult]:
        return {
            e["nodeid"]: TestResult(e["nodeid"], e["cell"], float(e["points"]), 0.0, "failed",
                                    f"not graded: {why}")
            for e in self.tests
        }  # fmt: skip

    def _grade_one(self, sub: Submission, index: int, names: list[str] | None) -> list[Row]:
        start = time.monotonic()
        task, prepared = prepare(sub, self.release)
        rows = []
        for student, id_ in _identities(sub, names):
            row = copy.deepcopy(prepared)
            row.student, row.id = student, id_
            rows.append(row)
        if prepared.status in ("error", "skipped"):
            for row in rows:
                self._finish(row, {}, row.reason, start)
            return rows
        default = next(iter(self.release))
        task.update(
            assignment=self.assignment,
            salt=self.options.salt,
            timeout=self.options.timeout,
            load_timeout=self.options.load_timeout,
            default_notebook=default,
        )
        stem = f"{self.assignment}-sub{index}"
        task_path = self.run_dir / f"{stem}.task.json"
        task_path.write_text(json.dumps(task), encoding="utf-8")
        runs = [
            {
                "student": row.student,
                "results_path": str(self.run_dir / f"{stem}-{i}.results.jsonl"),
                "session_path": str(self.run_dir / f"{stem}-{i}.session.json"),
                "reply_path": str(self.run_dir / f"{stem}-{i}.reply.json"),
            }
            for i, row in enumerate(rows)
        ]
        for run in runs:  # left by an earlier batch of this grader: results are appended
            for key in ("results_path", "session_path", "reply_path"):
                Path(run[key]).unlink(missing_ok=True)
        reply = self.pool.call(
            {
                "op": "grade",
                "task": str(task_path),
                "suite": str(self.suite),
                "runs": runs,
                "wall": self.options.wall,
                # the suite's forbidden specs: the runner resolves them once (see Runner.warm)
                "forbid": sorted({s for e in self.tests for s in e.get("forbid", [])}),
            }
        )
        for row, run in zip(rows, runs):
            results: dict[str, TestResult] = {}
            results_path, session_path = Path(run["results_path"]), Path(run["session_path"])
            if results_path.exists():
                for line in results_path.read_text(errors="replace").splitlines():
                    try:
                        result = TestResult.from_dict(json.loads(line))
                    except (ValueError, AttributeError, TypeError):
                        continue  # a line cut short by a crash
                    results[result.nodeid] = result
            if session_path.exists():
                try:
                    session = json.loads(session_path.read_text(errors="replace"))
                except ValueError:
                    session = {}
                for name, info in session.items() if isinstance(session, dict) else ():
                    provided = task["notebooks"].get(name, {}).get("provided", [])
                    for note in info.get("load_notes", []):
                        if not any(note.startswith(f"{label}, line ") for label in provided):
                            row.notes.append(f"while loading your code: {note}")
                    row.workers[name] = info.get("workers_started", 0)
            run_reply = _read_reply(Path(run["reply_path"])) or reply
            run_reason = None
            out_of_time = any("total time limit" in r.message for r in results.values())
            if run_reply.get("timed_out") or out_of_time:
                run_reason = (
                    f"the submission exceeded its {self.options.wall:.0f} s time limit; the "
                    "tests not finished by then scored 0"
                )
                row.fault = row.fault or "student"
            elif run_reply.get("error") or run_reply.get("exit"):
                shown = {k: v for k, v in run_reply.items() if k != "seconds"}
                run_reason = f"grading stopped unexpectedly ({run_reply.get('error') or shown})"
                row.fault = "grader"
            seconds = run_reply.get("seconds") if len(rows) > 1 else None
            self._finish(row, results, run_reason, start, seconds)
        return rows

    def _finish(
        self,
        row: Row,
        results: dict[str, TestResult],
        run_reason: str | None,
        start: float,
        seconds: float | None = None,
    ) -> None:
        """The row's tests (a test without a result scores 0, with the reason), cells, score."""
        for entry in self.tests:
            result = results.get(entry["nodeid"])
            if result is None:
                why = run_reason or row.reason or "the test did not run"
                result = TestResult(entry["nodeid"], entry["cell"], float(entry["points"]), 0.0,
                                    "failed", f"not graded: {why}")  # fmt: skip
                if run_reason is None and row.reason is None:
                    run_reason = "some tests did not run"
                    row.fault = row.fault or "grader"
            row.tests[entry["nodeid"]] = result
        if run_reason and not row.reason:
            row.reason = run_reason
        row.cells = self._cells(row.tests)
        row.score = round(sum(c.score for c in row.cells.values()), 6)
        row.max_score = round(sum(c.max_score for c in row.cells.values()), 6)
        row.percent = round(100 * row.score / row.max_score, 2) if row.max_score else 0
        elapsed = seconds if isinstance(seconds, (int, float)) else time.monotonic() - start
        row.seconds = round(elapsed, 3)
        row.notes = [clean_text(n) for n in row.notes]

    def _cells(self, tests: dict[str, TestResult]) -> dict[str, CellScore]:
        cells: dict[str, CellScore] = {}
        notebook_of = {
            e["nodeid"]: e.get("notebook") or next(iter(self.release)) for e in self.tests
        }
        for nodeid, result in tests.items():
            notebook = notebook_of.get(nodeid) or next(iter(self.release))
            key = f"{notebook}::{result.cell}"
            cell = cells.setdefault(key, CellScore(notebook, result.cell))
            cell.score += result.points
            cell.max_score += result.max_points
        for cell in cells.values():
            declared = self.grade_cells.get((cell.notebook, cell.grade_id))
            if declared is not None and declared.points:
                cell.score = min(cell.score, declared.points)
                cell.max_score = declared.points
        return cells


def _identities(sub: Submission, names: list[str] | None) -> list[tuple[str, str]]:
    """(student, output folder name) of each row a submission gets."""
    if names is None:
        return [(sub.student, sub.id)]
    return [(name, safe_name(name)) for name in names]


def _read_reply(path: Path) -> dict:
    """A run's reply, written by its runner child (missing if that child never got to it)."""
    try:
        reply = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return reply if isinstance(reply, dict) else {}


def _clean(value: Any) -> Any:
    """``value`` with no lone surrogate in any string (names read from a non-UTF-8 folder)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value
