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
    from autograder.host.intake import discover, folder_submission, safe_name
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
    g.own_files.verify()  # every worker gone: before any late import and any other output
    answers = {}
    for row in rows:
        answers[row["student"]] = row.pop("answers", {})
        row["manual_pending"] = manual
    writer.finish(rows)
    if not (args.no_similarity or args.gradescope) and subs:  # not on a Gradescope runner
        from autograder.tools.similarity import report_safely  # flags only: never changes a score

        report_safely(course, args.assignment, subs, out)
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
    print(
        f"sandbox: {sandbox.get('network')}; {sandbox.get('filesystem')}; uid {sandbox.get('uid')}"
    )
    width = max([len(r["student"]) for r in rows] + [7])
    for row in rows:
        reason = f"  ({row['reason']})" if row["reason"] else ""
        print(f"  {row['student']:<{width}} {row['score']:>6g} / {row['max_score']:<6g}{reason}")
    print(f"graded {len(rows)} submission(s); grades.csv, report.json and feedback/ in {out}")
    faults = [f"{r['student']}: {r['reason']}" for r in rows if r.get("fault") == "grader"]
    for fault in faults + writer.errors:
        print(f"grader fault: {fault}", file=sys.stderr)
    return 3 if faults or writer.errors else 0
