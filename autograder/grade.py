"""Grading a batch of submissions: discover, prepare (trusted, no execution), run, aggregate.

:class:`Grader` starts ``jobs`` runners (:mod:`autograder.runner`), asks one for the suite's
manifest, then hands each prepared submission to the next free runner. Every submission gets a
row, whatever is wrong with it: a reason, its files' SHA-256, per-test points and messages.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .course import PACKAGE_ROOT, Course
from .notebook import (
    Cell,
    NotebookError,
    assemble,
    extract,
    read_notebook,
    sha256_file,
)
from .scan import scan

MAX_FILES = 200


@dataclass
class Options:
    jobs: int = 2
    timeout: float = 10.0  # per call
    wall: float = 300.0  # per submission
    load_timeout: float = 30.0
    cpu: int = 600  # CPU seconds per worker process (a backstop; calls have their own limit)
    memory_gib: float = 4.0  # address space per worker (at least 4)
    sandbox: str = "auto"  # "auto", "namespace" or "fallback"
    salt: str = field(default_factory=lambda: os.environ.get("AUTOGRADER_SALT", ""))
    progress: bool = True


@dataclass
class Submission:
    student: str
    notebooks: dict[str, Path | None]
    files: list[Path]
    base: Path
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def safe_name(student: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@+-]", "_", student) or "_"


# ---------------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------------


def discover(folder: Path, assignment: str, release: list[str]) -> list[Submission]:
    """Submissions in nbgrader's ``<student>/<assignment>/`` layout, per-student folders, or a
    plain folder of notebooks (one file per student, named after the student)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SystemExit(f"error: submissions folder {folder} does not exist")
    found: list[Submission] = []
    used: set[str] = set()

    def unique(name: str) -> str:
        candidate, n = name, 2
        while candidate in used:
            candidate, n = f"{name}-{n}", n + 1
        used.add(candidate)
        return candidate

    entries = [e for e in sorted(folder.iterdir()) if not e.name.startswith(".")]
    nbgrader_layout = any((e / assignment).is_dir() for e in entries if e.is_dir())
    for entry in entries:
        if entry.is_dir() and nbgrader_layout and not (entry / assignment).is_dir():
            continue  # this student submitted other assignments, not this one
        if entry.is_dir():
            inner = entry / assignment if (entry / assignment).is_dir() else entry
            found.append(_folder_submission(unique(entry.name), inner, release))
        elif entry.is_file():
            student = unique(entry.stem)
            sub = Submission(student, {}, [entry], folder)
            if len(release) == 1:
                sub.notebooks[release[0]] = entry
            else:
                sub.notebooks = {name: (entry if entry.name == name else None) for name in release}
            if entry.suffix != ".ipynb":
                sub.error = f"{entry.name} is not a notebook: submit the .ipynb file"
            found.append(sub)
    return found


def _folder_submission(student: str, folder: Path, release: list[str]) -> Submission:
    files = sorted(
        p for p in folder.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts
    )
    sub = Submission(student, {}, files[:MAX_FILES], folder)
    if len(files) > MAX_FILES:
        sub.notes.append(f"{len(files)} files submitted; only the first {MAX_FILES} were recorded")
    top = [p for p in files if p.parent == folder and p.suffix == ".ipynb"]
    for name in release:
        path = folder / name
        sub.notebooks[name] = path if path.is_file() else None
    missing = [n for n, p in sub.notebooks.items() if p is None]
    spare = [p for p in top if p.name not in sub.notebooks]
    if len(missing) == 1 and len(spare) == 1:
        sub.notebooks[missing[0]] = spare[0]
        sub.notes.append(f"graded {spare[0].name} in place of the expected {missing[0]}")
    extra = [p for p in files if p not in sub.notebooks.values()]
    if extra:
        names = ", ".join(str(p.relative_to(folder)) for p in extra[:8])
        more = f" and {len(extra) - 8} more" if len(extra) > 8 else ""
        sub.notes.append(
            f"extra files ignored: {names}{more} (only the notebook's code is graded; files "
            "next to it, such as a course_lib.py or autograder.py, are never imported)"
        )
    if not files:
        sub.error = "empty submission folder: no notebook was submitted"
    return sub


# ---------------------------------------------------------------------------------------------
# Preparation (trusted, nothing executed)
# ---------------------------------------------------------------------------------------------


def prepare(sub: Submission, release: dict[str, list[Cell]]) -> tuple[dict, dict]:
    """Return (task for the runner, row skeleton)."""
    row: dict[str, Any] = {
        "student": sub.student,
        "status": "graded",
        "reason": None,
        "files": [],
        "notes": list(sub.notes),
        "notebooks": {},
    }
    for path in sub.files:
        try:
            row["files"].append(
                {
                    "path": str(path.relative_to(sub.base)),
                    "sha256": sha256_file(path),
                    "size": path.stat().st_size,
                }
            )
        except OSError as error:
            row["files"].append({"path": str(path), "error": str(error)})
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
        row["notebooks"][name] = {"file": path.name, "sha256": read.sha256}
        answers = row.setdefault("answers", {}).setdefault(name, {})
        for cell in read.cells:
            gid = cell.nbgrader.get("grade_id")
            if cell.nbgrader.get("solution") and gid and gid not in answers:
                answers[gid] = cell.source
        chunks, notes = assemble(read.cells, release[name])
        notes = read.notes + notes
        extracted = []
        for chunk in chunks:
            ex, more = extract(chunk)
            notes.extend(more)
            if ex is not None:
                extracted.append(ex)
        result = scan(extracted)
        task["notebooks"][name] = {
            "chunks": [(e.label, e.source, e.keep) for e in extracted],
            "scan": {
                "references": [r.__dict__ for r in result.references],
                "tampering": result.tampering,
            },
        }
        row["notes"].extend(f"{name}: {n}" if len(release) > 1 else n for n in notes)
    if reasons:
        row["reason"] = "; ".join(reasons)
        if not task["notebooks"]:
            row["status"] = "error"
    return task, row


# ---------------------------------------------------------------------------------------------
# Runners
# ---------------------------------------------------------------------------------------------


class RunnerPool:
    """``n`` warm runner processes; each serves one command at a time."""

    def __init__(self, n: int, init: dict, run_dir: Path):
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PACKAGE_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
        env.update(
            PYTHONDONTWRITEBYTECODE="1",
            PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            MPLBACKEND="Agg",
        )
        self.procs: list[subprocess.Popen] = []
        self.free: queue.Queue[int] = queue.Queue()
        for i in range(n):
            config = json.loads(json.dumps(init))
            config["log"] = str(run_dir / f"runner{i}.log")
            config["sandbox"]["scratch"] = tempfile.mkdtemp(prefix=f"ag-scratch{i}-")
            config["sandbox"]["log"] = str(run_dir / f"zygote{i}.log")
            proc = subprocess.Popen(
                [sys.executable, "-m", "autograder.runner"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=run_dir,
                env=env,
            )
            proc.stdin.write(json.dumps(config) + "\n")
            proc.stdin.flush()
            self.procs.append(proc)
        self.report: dict = {}
        for i, proc in enumerate(self.procs):
            line = proc.stdout.readline()
            reply = json.loads(line) if line else {"ready": False, "error": "runner exited"}
            if not reply.get("ready"):
                log = (run_dir / f"runner{i}.log").read_text(errors="replace")[-3000:]
                self.close()
                raise RuntimeError(f"grading runner failed to start: {reply.get('error')}\n{log}")
            self.report = reply["report"]
            self.free.put(i)

    def call(self, cmd: dict) -> dict:
        i = self.free.get()
        try:
            proc = self.procs[i]
            proc.stdin.write(json.dumps(cmd) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            if not line:
                return {"error": "the grading runner exited unexpectedly"}
            return json.loads(line)
        finally:
            self.free.put(i)

    def close(self) -> None:
        for proc in self.procs:
            try:
                proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
                proc.stdin.close()
            except (OSError, ValueError):
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# ---------------------------------------------------------------------------------------------
# The grader
# ---------------------------------------------------------------------------------------------


class Runners:
    """A working folder and a pool of warm runners, shared by the Graders of one command."""

    def __init__(self, course: Course, options: Options, hide: list[Path]):
        self.course, self.options, self.hide = course, options, hide
        self.run_dir: Path | None = None
        self.pool: RunnerPool | None = None

    def __enter__(self) -> Runners:
        self.run_dir = Path(tempfile.mkdtemp(prefix="autograder-run-"))
        ini = self.run_dir / "pytest.ini"
        ini.write_text("[pytest]\n")
        hidden = self.course.hidden_paths(self.run_dir, *self.hide)
        protected = [PACKAGE_ROOT, Path(sys.prefix), Path(sys.base_prefix), Path.cwd()]
        hidden = [h for h in hidden if not any(_is_ancestor(Path(h), p) for p in protected)]
        o = self.options
        init = {
            "ini": str(ini),
            "sandbox": {
                "mode": o.sandbox,
                "hide": hidden,
                "limits": {"cpu": o.cpu, "address_space": int(max(4.0, o.memory_gib) * 1024**3)},
            },
        }
        try:
            self.pool = RunnerPool(max(1, o.jobs), init, self.run_dir)
        except BaseException:
            self.__exit__()
            raise
        return self

    def log(self) -> str:
        logs = sorted(self.run_dir.glob("runner*.log")) if self.run_dir else []
        return "\n".join(p.read_text(errors="replace")[-2000:] for p in logs)

    def __exit__(self, *exc: Any) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self.run_dir is not None and not os.environ.get("AUTOGRADER_KEEP_RUN"):
            shutil.rmtree(self.run_dir, ignore_errors=True)


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
            raise SystemExit(f"error: no hidden suite for {assignment!r} at {self.suite}")
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
            raise SystemExit(
                "error: the hidden suite has problems:\n  " + "\n  ".join(self.manifest["errors"])
            )
        if not self.manifest["tests"]:
            raise SystemExit(f"error: the hidden suite {self.suite} has no tests")

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

    def grade(self, submissions: list[Submission]) -> list[dict]:
        rows: list[dict | None] = [None] * len(submissions)
        bar = None
        if self.options.progress and len(submissions) > 1:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(submissions), desc=f"grading {self.assignment}", unit="sub")
        lock = threading.Lock()

        def work(index: int) -> None:
            rows[index] = self._grade_one(submissions[index], index)
            if bar is not None:
                with lock:
                    bar.update(1)

        with ThreadPoolExecutor(max_workers=max(1, self.options.jobs)) as pool:
            list(pool.map(work, range(len(submissions))))
        if bar is not None:
            bar.close()
        return [r for r in rows if r is not None]

    def _grade_one(self, sub: Submission, index: int) -> dict:
        start = time.monotonic()
        task, row = prepare(sub, self.release)
        results: dict[str, dict] = {}
        run_reason = row["reason"] if row["status"] == "error" else None
        if row["status"] != "error":
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
            task_path.write_text(json.dumps(task))
            results_path = self.run_dir / f"{stem}.results.jsonl"
            session_path = self.run_dir / f"{stem}.session.json"
            reply = self.pool.call(
                {
                    "op": "grade",
                    "task": str(task_path),
                    "suite": str(self.suite),
                    "results_path": str(results_path),
                    "session_path": str(session_path),
                    "wall": self.options.wall,
                }
            )
            if results_path.exists():
                for line in results_path.read_text().splitlines():
                    if line.strip():
                        result = json.loads(line)
                        results[result["nodeid"]] = result
            if session_path.exists():
                for name, info in json.loads(session_path.read_text()).items():
                    for note in info.get("load_notes", []):
                        row["notes"].append(f"while loading your code: {note}")
                    row.setdefault("workers", {})[name] = info.get("workers_started", 0)
            if reply.get("timed_out"):
                run_reason = f"the submission exceeded its {self.options.wall:.0f} s time limit"
            elif reply.get("error") or reply.get("exit"):
                run_reason = f"grading stopped unexpectedly ({reply.get('error') or reply})"
        tests = {}
        for entry in self.tests:
            result = results.get(entry["nodeid"])
            if result is None:
                why = run_reason or row["reason"] or "the test did not run"
                result = {
                    "nodeid": entry["nodeid"],
                    "cell": entry["cell"],
                    "max_points": entry["points"],
                    "points": 0.0,
                    "status": "failed",
                    "message": f"not graded: {why}",
                    "output": "",
                }
            tests[entry["nodeid"]] = result
        row["tests"] = tests
        if run_reason and not row["reason"]:
            row["reason"] = run_reason
        row["cells"] = self._cells(tests)
        row["score"] = round(sum(c["score"] for c in row["cells"].values()), 6)
        row["max_score"] = round(sum(c["max_score"] for c in row["cells"].values()), 6)
        row["percent"] = round(100 * row["score"] / row["max_score"], 2) if row["max_score"] else 0
        row["seconds"] = round(time.monotonic() - start, 3)
        return row

    def _cells(self, tests: dict[str, dict]) -> dict[str, dict]:
        cells: dict[str, dict] = {}
        notebook_of = {
            e["nodeid"]: e.get("notebook") or next(iter(self.release)) for e in self.tests
        }
        for nodeid, result in tests.items():
            key = f"{notebook_of[nodeid]}::{result['cell']}"
            cell = cells.setdefault(
                key,
                {"notebook": notebook_of[nodeid], "grade_id": result["cell"], "score": 0.0,
                 "max_score": 0.0},
            )  # fmt: skip
            cell["score"] += result["points"]
            cell["max_score"] += result["max_points"]
        for cell in cells.values():
            declared = self.grade_cells.get((cell["notebook"], cell["grade_id"]))
            if declared is not None and declared.points:
                cell["score"] = min(cell["score"], declared.points)
                cell["max_score"] = declared.points
        return cells


def _is_ancestor(hidden: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(hidden.resolve())
        return True
    except ValueError:
        return False
