"""Command line: ``python -m autograder {release,grade,check,selfgrade,fairness,gradescope,
written} ...``.

Run from the course folder (the one holding ``nbgrader_config.py``) or pass ``--course-dir``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from autograder.course.layout import Course, find_course
from autograder.host.grader import Grader
from autograder.host.intake import Submission, discover, safe_name
from autograder.host.options import Options


def _options(args: argparse.Namespace) -> Options:
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


def _trusted_options(args: argparse.Namespace) -> Options:
    """Options for commands that grade only the instructor's own material (reference, blank,
    samples, mutants): where namespaces are missing (a laptop without root), ``auto`` falls back,
    saying so, instead of refusing as ``grade`` does for students' submissions."""
    options = _options(args)
    if options.sandbox == "auto":
        from autograder.sandbox.namespaces import available

        if not available():
            print("sandbox: no namespaces here; grading the course's own material in fallback mode")
            options.sandbox = "fallback"
    return options


def _add_limits(p: argparse.ArgumentParser, jobs: int = 2) -> None:
    p.add_argument("--jobs", type=int, default=jobs, help="parallel runners (default %(default)s)")
    p.add_argument("--timeout", type=float, default=10.0, help="CPU seconds per call (default 10)")
    p.add_argument("--wall", type=float, default=300.0, help="seconds per submission (300)")
    p.add_argument("--load-timeout", type=float, default=30.0, help="seconds to load the code")
    p.add_argument("--cpu", type=int, default=600, help="CPU seconds per worker process (600)")
    p.add_argument(
        "--memory-gib", type=float, default=4.0, help="address space per worker, >= 4 (4)"
    )
    p.add_argument(
        "--sandbox",
        choices=("auto", "namespace", "fallback"),
        default=os.environ.get("AUTOGRADER_SANDBOX", "auto"),
        help="namespaces (auto, the default: refuses where they are not available; namespace "
        "is the same) or fallback, asked for by name (also AUTOGRADER_SANDBOX=fallback)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def cmd_build(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.authoring import build

    return build(course, args.assignments)


def cmd_mutants(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.mutants import catalogued, mutants, overview

    names = catalogued(course) if args.all else args.assignments
    if not names or (args.out and len(names) > 1):
        print("mutants: name one or more assignments, or --all (--out only with one)")
        return 2
    options, status, outs = _trusted_options(args), 0, []
    for name in names:
        out = Path(args.out) if args.out else course.grading_dir / f"mutants-{name}.json"
        status |= mutants(course, name, options, out, names=args.names, strict=args.strict)
        outs.append((name, out))
    if len(outs) > 1:
        overview(outs)
    return status


def cmd_release(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.release import release

    return release(course, args.assignments)


def _single(folder: Path, student: str, release: list[str]) -> list[Submission]:
    from autograder.host.intake import _folder_submission

    return [_folder_submission(student, folder, release)]


def cmd_grade(args: argparse.Namespace, course: Course) -> int:
    """Exit status: 0 every submission has its row (student faults are rows with a reason);
    3 the run finished but some rows are grader faults (their ``fault`` is "grader") or an
    output could not be written; 1 or 2 nothing was graded (configuration or usage error)."""
    from autograder.host.report import ReportWriter

    options = _options(args)
    source = Path(args.submissions) if args.submissions else course.submitted_dir
    out = Path(args.out) if args.out else course.root / "autograder_out" / args.assignment
    with Grader(course, args.assignment, options, hide=[source.resolve(), out.resolve()]) as g:
        release = list(g.release)
        if args.student:
            subs = _single(source, args.student, release)
        else:
            subs = discover(source, args.assignment, release)
        if not subs:
            print(f"no submissions found in {source}", file=sys.stderr)
        manual = any(not c.autograded for c in g.grade_cells.values())
        writer = ReportWriter(out, args.assignment, g.tests, g.sandbox_report)

        def on_row(row: dict) -> None:  # written as graded: a crash later loses nothing
            row["manual_pending"] = manual
            writer.add(row)

        rows = g.grade(subs, on_row=on_row)
        sandbox = g.sandbox_report
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


def cmd_similarity(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.similarity import main as similarity

    return similarity(args, course)


def cmd_check(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.selfcheck import check

    return check(course, args.assignment, _trusted_options(args))


def cmd_selfgrade(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.selfcheck import selfgrade

    out = Path(args.out) if args.out else course.grading_dir / "selfgrade.json"
    return selfgrade(course, args.assignments, _trusted_options(args), out)


def cmd_gradescope(args: argparse.Namespace, course: Course) -> int:
    from autograder.integrations.gradescope import build

    out = (
        Path(args.out)
        if args.out
        else course.root / "autograder_out" / f"{args.assignment}-gradescope.zip"
    )
    build(course, args.assignment, out, visibility=args.visibility,
          test_visibility=args.test_visibility)  # fmt: skip
    return 0


def cmd_written(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.written import write_all

    source = Path(args.submissions) if args.submissions else course.submitted_dir
    out = Path(args.out) if args.out else course.grading_dir / "written" / args.assignment
    write_all(course, args.assignment, source, out)
    return 0


def cmd_fairness(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.fairness import fairness

    out = Path(args.out) if args.out else course.grading_dir / "fairness.json"
    return fairness(course, args.assignments, _trusted_options(args), out, names=args.names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    parser.add_argument("--course-dir", help="the course folder (default: here, or this repo)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build", help="solutions/<name>/<name>.ipynb and samples from <name>.md")
    p.add_argument("assignments", nargs="+")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("mutants", help="grade the catalogue of usual mistakes; kill/named rates")
    p.add_argument("assignments", nargs="*", help="one or more assignments")
    p.add_argument("--all", action="store_true", help="every assignment with a mutants.yml")
    p.add_argument("--names", type=int, default=3, help="student names (seeds) per mutant (3)")
    p.add_argument("--strict", action="store_true", help="fail below 100%% killed, 80%% named")
    p.add_argument("--out", help="rows (default grading/mutants-<assignment>.json)")
    _add_limits(p)
    p.set_defaults(func=cmd_mutants)

    p = sub.add_parser("release", help="regenerate assignments/<name>/ from solutions/<name>/")
    p.add_argument("assignments", nargs="+")
    p.set_defaults(func=cmd_release)

    p = sub.add_parser("grade", help="grade submissions with the hidden suite")
    p.add_argument("assignment")
    p.add_argument(
        "--submissions",
        help="nbgrader's submitted/ (default), per-student folders, or a folder of notebooks",
    )
    p.add_argument("--student", help="treat --submissions as the folder of this one student")
    p.add_argument("--out", help="output folder (default autograder_out/<assignment>)")
    p.add_argument("--gradescope", help="also copy the (single) results.json here")
    p.add_argument("--no-gradebook", action="store_true", help="do not write nbgrader's gradebook")
    p.add_argument("--no-similarity", action="store_true", help="skip similarity.md/.html")
    _add_limits(p)
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("similarity", help="flag graded cells like the references or each other")
    p.add_argument("assignment")
    p.add_argument("--submissions", help="the same layouts as grade (default: grading/submitted)")
    p.add_argument("--out", help="output folder (default autograder_out/<assignment>)")
    p.add_argument("--past", nargs="+", action="extend", help="folders of earlier submissions")
    p.add_argument("--threshold", type=float, default=0.6, help="flag pairs >= this (0.6)")
    p.set_defaults(func=cmd_similarity)

    p = sub.add_parser("check", help="reference scores 100%%, blank 0, rerun identical")
    p.add_argument("assignment")
    _add_limits(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("selfgrade", help="grade reference, blank and samples against expected.json")
    p.add_argument("assignments", nargs="+")
    p.add_argument("--out", help="where to write the rows (default grading/selfgrade.json)")
    _add_limits(p)
    p.set_defaults(func=cmd_selfgrade)

    p = sub.add_parser("gradescope", help="write a Gradescope autograder zip")
    p.add_argument("assignment")
    p.add_argument("--out", help="zip path (default autograder_out/<assignment>-gradescope.zip)")
    p.add_argument("--visibility", help="every test's Gradescope visibility (default visible)")
    p.add_argument(
        "--test-visibility", action="append", metavar="PATTERN=LEVEL",
        help="visibility of the tests whose node id matches PATTERN (repeatable)",
    )  # fmt: skip
    p.set_defaults(func=cmd_gradescope)

    p = sub.add_parser("written", help="one HTML page per student with the written answers")
    p.add_argument("assignment")
    p.add_argument("--submissions", help="default: nbgrader's submitted/")
    p.add_argument("--out", help="default grading/written/<assignment>/")
    p.set_defaults(func=cmd_written)

    p = sub.add_parser("fairness", help="grade each sample under many names; flag varying scores")
    p.add_argument("assignments", nargs="+")
    p.add_argument("--names", type=int, default=8, help="student names per sample (default 8)")
    p.add_argument("--out", help="where to write the rows (default grading/fairness.json)")
    _add_limits(p)
    p.set_defaults(func=cmd_fairness)

    args = parser.parse_args(argv)
    course = Course(find_course(args.course_dir))
    try:
        return args.func(args, course)
    except RuntimeError as error:
        if "sandbox failed to start" not in str(error):
            raise
        print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)  # no namespaces, say
        return 3  # how to proceed: a grader-side fault, not a student's


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
