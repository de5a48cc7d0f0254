"""Writing and releasing assignments: ``build``, ``release``, ``new-assignment``."""

from __future__ import annotations

import argparse

from autograder.cli import arg, command
from autograder.course.layout import Course


@command(
    "build",
    "solutions/<name>/<name>.ipynb and samples from <name>.md",
    arg("assignments", nargs="+"),
)
def build(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.authoring import build

    return build(course, args.assignments)


@command(
    "release",
    "regenerate assignments/<name>/ from solutions/<name>/",
    arg("assignments", nargs="+"),
)
def release(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.release import release

    return release(course, args.assignments)


@command(
    "new-assignment",
    "scaffold an assignment that passes `check` at once (make new-assignment NAME=a6_topic)",
    arg("name", help="a6_topic: a letter, a number, an underscore and a topic"),
)
def new_assignment(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.scaffold import scaffold

    return scaffold(course, args.name)


@command(
    "written",
    "one HTML page per student with the written answers",
    arg("assignment"),
    arg("--submissions", help="default: nbgrader's submitted/"),
    arg("--out", help="default grading/written/<assignment>/"),
)
def written(args: argparse.Namespace, course: Course) -> int:
    from pathlib import Path

    from autograder.tools.written import write_all

    source = Path(args.submissions) if args.submissions else course.submitted_dir
    out = Path(args.out) if args.out else course.grading_dir / "written" / args.assignment
    write_all(course, args.assignment, source, out)
    return 0


@command(
    "similarity",
    "flag graded cells like the references or each other",
    arg("assignment"),
    arg("--submissions", help="the same layouts as grade (default: grading/submitted)"),
    arg("--out", help="output folder (default autograder_out/<assignment>)"),
    arg("--past", nargs="+", action="extend", help="folders of earlier submissions"),
    arg("--background", nargs="+", action="extend", help="folders of independent rewrites"),
    arg("--threshold", type=float, default=0.5, help="flag pairs >= this (0.5)"),
)
def similarity(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.similarity import main as similarity

    return similarity(args, course)


@command(
    "insight",
    "what the class got wrong: named mistakes, scores, tests (insight.html, after grade)",
    arg("assignments", nargs="+", help="one or more graded assignments (several: trajectory)"),
    arg("--out", help="grade's output folder (default autograder_out/<assignment>)"),
    arg("--submissions", help="where the submissions are, for snippets (default submitted/)"),
    arg("--mutants", help="the catalogue's graded run (default grading/mutants-<name>.json)"),
    arg("--names", action="store_true", help="show student names (default: none)"),
)
def insight(args: argparse.Namespace, course: Course) -> int:
    from pathlib import Path

    from autograder.tools.insight import insight

    return insight(
        course,
        args.assignments,
        out_root=Path(args.out) if args.out else None,
        mutants_json=Path(args.mutants) if args.mutants else None,
        submissions=Path(args.submissions) if args.submissions else None,
        show_names=args.names,
    )
