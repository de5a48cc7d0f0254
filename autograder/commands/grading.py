"""Grading students' submissions: ``grade``."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from autograder.cli import arg, command
from autograder.course.layout import Course
from autograder.host.options import Options


def _private_bytecode() -> None:
    """Modules the grader imports from now on are compiled from their (verified) source or from
    a private cache, never from a ``__pycache__`` a submission could have planted a file in."""
    import atexit
    import tempfile

    sys.dont_write_bytecode = True
    sys.pycache_prefix = tempfile.mkdtemp(prefix="ag-pycache-")  # 0700, stays empty
    atexit.register(shutil.rmtree, sys.pycache_prefix, True)


SIMILARITY_SECONDS = 600.0  # the similarity report's deadline (its own process), by default
AFTER_ROWS_SECONDS = 900.0  # everything after the rows but similarity: pool, outputs, gradebook


class Watchdog:
    """Bounds what ``grade`` does once every row is written: if the command has not finished
    ``seconds`` later, every thread's stack goes to stderr, the runners are killed and the process
    exits with status 3 (the rows are on disk; what did not finish is a grader fault, never a
    hang). A daemon thread: it fires while the main thread waits in C (a ``wait``, a pipe)."""

    def __init__(self, seconds: float, what: str, kill: list | None = None):
        import threading

        self.seconds, self.what, self.kill = seconds, what, kill if kill is not None else []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="grade-watchdog", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        if self.done.wait(self.seconds):
            return
        import faulthandler
        import os

        print(
            f"grader fault: {self.what} did not finish within {self.seconds:g} s after the rows "
            "were written (the rows, grades.csv and report.json are written; stacks below)",
            file=sys.stderr,
            flush=True,
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        for kill in self.kill:
            try:
                kill()
            except Exception:  # noqa: BLE001 - exiting regardless
                pass
        sys.stderr.flush()
        os._exit(3)

    def stop(self) -> None:
        self.done.set()


def bounded_similarity(course: Course, assignment: str, subs: list, out: Path,
                       seconds: float) -> bool:  # fmt: skip
    """The similarity report in a child process with a deadline: a report never holds the
    command (a pathological notebook, a bug). False (and said on stderr) if it was stopped."""
    import multiprocessing

    from autograder.tools.similarity import report_safely  # flags only: never changes a score

    sys.stdout.flush()
    sys.stderr.flush()
    child = multiprocessing.get_context("fork").Process(
        target=report_safely, args=(course, assignment, subs, out), daemon=True
    )
    child.start()
    child.join(seconds)
    if child.is_alive():
        child.kill()
        child.join(10)
        print(
            f"similarity report skipped: it did not finish within {seconds:g} s (stopped; the "
            "grades are not affected; `python -m autograder similarity` runs it alone)",
            file=sys.stderr,
        )
        return False
    if child.exitcode != 0:
        print(f"similarity report skipped: its process ended with status {child.exitcode}",
              file=sys.stderr)  # fmt: skip
        return False
    return True


def options_from(args: argparse.Namespace) -> Options:
    return Options(
        jobs=args.jobs,
        timeout=args.timeout,
        wall=args.wall,
        load_timeout=args.load_timeout,
        cpu=args.cpu,
        memory_gib=args.memory_gib,
        sandbox=args.sandbox,
        progress=not args.quiet,
    )


def trusted_options(args: argparse.Namespace) -> Options:
    """Options for commands that grade only the instructor's own material (reference, blank,
    samples, mutants): where namespaces are missing (a laptop without root), ``auto`` falls back,
    saying so, instead of refusing as ``grade`` does for students' submissions."""
    options = options_from(args)
    if options.sandbox == "auto":
        from autograder.sandbox.namespaces import available

        if not available():
            print("sandbox: no namespaces here; grading the course's own material in fallback mode")
            options.sandbox = "fallback"
    return options


@command(
    "grade",
    "grade submissions with the hidden suite",
    arg("assignment"),
    arg(
        "--submissions",
        help="nbgrader's submitted/ (default), per-student folders, or a folder of notebooks",
    ),
    arg("--student", help="treat --submissions as the folder of this one student"),
    arg("--out", help="output folder (default autograder_out/<assignment>)"),
    arg("--gradescope", help="also copy the (single) results.json here"),
    arg("--no-gradebook", action="store_true", help="do not write nbgrader's gradebook"),
    arg("--no-similarity", action="store_true", help="skip similarity.md/.html"),
    arg(
        "--similarity-timeout",
        type=float,
        default=SIMILARITY_SECONDS,
        help="stop the similarity report after this many seconds (%(default)g; grades unaffected)",
    ),
    arg(
        "--points-mismatch",
        choices=("refuse", "warn"),
        default="refuse",
        help="when the hidden tests' points disagree with the notebook's grade cells: refuse "
        "to grade (default) or grade with the notebook's points, saying so",
    ),
    limits=True,
)
def grade(args: argparse.Namespace, course: Course) -> int:
    """Exit status: 0 every submission has its row (student faults are rows with a reason);
    3 the run finished but some rows are grader faults (their ``fault`` is "grader") or an
    output could not be written; 1 or 2 nothing was graded (configuration or usage error)."""
    from autograder.host.grader import Grader
    from autograder.host.intake import discover, folder_submission
    from autograder.host.report import ReportWriter

    _private_bytecode()
    options = options_from(args)
    source = Path(args.submissions) if args.submissions else course.submitted_dir
    out = Path(args.out) if args.out else course.root / "autograder_out" / args.assignment
    hide = [source.resolve(), out.resolve()]
    if args.gradescope:  # Gradescope's results folder: hidden from (and closed to) the workers
        hide.append(Path(args.gradescope).resolve().parent)
    with Grader(course, args.assignment, options, hide=hide) as g:
        from autograder.tools.selfcheck import consistency

        problems = consistency(g)  # what `check` verifies, before a single student is graded
        if problems:
            said = "\n  ".join(problems)
            what = f"the hidden suite of {args.assignment} disagrees with its notebook"
            fix = (
                f"fix the suite's points(...) or the check cell's :points: in "
                f"solutions/{args.assignment}/{args.assignment}.md, run `python -m autograder "
                f"release {args.assignment}` and `python -m autograder check {args.assignment}`"
            )
            if args.points_mismatch == "refuse":
                print(f"error: {what}; nothing was graded:\n  {said}\n{fix}", file=sys.stderr)
                return 2
            print(f"WARNING: {what} (graded with the notebook's points, each cell capped at "
                  f"them):\n  {said}\n{fix}", file=sys.stderr)  # fmt: skip
        release = list(g.release)
        if args.student:
            subs = [folder_submission(args.student, source, release)]
        else:
            subs = discover(source, args.assignment, release)
        if not subs:
            print(f"no submissions found in {source}", file=sys.stderr)
        manual = any(not c.autograded for c in g.grade_cells.values())
        writer = ReportWriter(out, args.assignment, g.tests, g.sandbox_report)

        def on_row(row: dict) -> None:  # written as graded: a crash later loses nothing
            row["manual_pending"] = manual
            g.own_files.verify()  # the grader's files as they were before student code ran
            writer.add(row)

        rows = g.grade(subs, on_row=on_row)
        sandbox = g.sandbox_report
        # every row is written: from here on, nothing may hang (runners, outputs, gradebook)
        budget = AFTER_ROWS_SECONDS + (0 if args.no_similarity else args.similarity_timeout)
        watchdog = Watchdog(budget, "grade", kill=[g.runners.kill] if g.runners else [])
    try:
        return _after_rows(args, course, g, rows, subs, out, writer, manual, sandbox)
    finally:
        watchdog.stop()


def _after_rows(args, course, g, rows, subs, out, writer, manual, sandbox) -> int:  # noqa: ANN001
    """What ``grade`` writes once every row is: the report, similarity, the gradebook."""
    from autograder.host.intake import safe_name

    g.own_files.verify()  # every worker gone: before any late import and any other output
    answers = {}
    for row in rows:
        answers[row["student"]] = row.pop("answers", {})
        row["manual_pending"] = manual
    writer.finish(rows)
    if not (args.no_similarity or args.gradescope) and subs:  # not on a Gradescope runner
        bounded_similarity(course, args.assignment, subs, out, args.similarity_timeout)
    if args.gradescope:
        if len(rows) != 1:
            print("error: --gradescope needs exactly one submission", file=sys.stderr)
            return 2
        shutil.copyfile(
            out
            / "feedback"
            / (rows[0].get("id") or safe_name(rows[0]["student"]))
            / "results.json",
            args.gradescope,
        )
    if not args.no_gradebook and rows:
        from autograder.integrations.bookkeeping import finish, quiet_sqlalchemy
        from autograder.integrations.gradebook import record

        quiet_sqlalchemy()
        record(course, args.assignment, rows, answers)
        finish(course, args.assignment, subs, rows)  # timestamps, secrets, due date, outputs
        writer.finish(rows)  # report.json again, now with each row's timestamp and lateness
    print(
        f"sandbox: {sandbox.get('network')}; {sandbox.get('filesystem')}; uid {sandbox.get('uid')}"
    )
    width = max([len(r["student"]) for r in rows] + [7])
    for row in rows:
        reason = f"  ({row['reason']})" if row["reason"] else ""
        print(f"  {row['student']:<{width}} {row['score']:>6g} / {row['max_score']:<6g}{reason}")
    print(f"graded {len(rows)} submission(s); grades.csv, report.json and feedback/ in {out}")
    if rows and not args.gradescope:  # the class report: what the class got wrong
        from autograder.tools.insight import after_grading

        after_grading(course, args.assignment, out, subs)
    faults = [f"{r['student']}: {r['reason']}" for r in rows if r.get("fault") == "grader"]
    for fault in faults + writer.errors:
        print(f"grader fault: {fault}", file=sys.stderr)
    return 3 if faults or writer.errors else 0
