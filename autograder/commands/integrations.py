"""Hosted grading: ``gradescope`` (write the zip) and ``gradescope-run`` (inside Gradescope)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from autograder.cli import arg, command, main
from autograder.course.layout import Course


@command(
    "gradescope",
    "write a Gradescope autograder zip",
    arg("assignment"),
    arg("--out", help="zip path (default autograder_out/<assignment>-gradescope.zip)"),
    arg("--visibility", help="every test's Gradescope visibility (default visible)"),
    arg(
        "--test-visibility",
        action="append",
        metavar="PATTERN=LEVEL",
        help="visibility of the tests whose node id matches PATTERN (repeatable)",
    ),
)
def gradescope(args: argparse.Namespace, course: Course) -> int:
    from autograder.integrations.gradescope import build

    out = (
        Path(args.out)
        if args.out
        else course.root / "autograder_out" / f"{args.assignment}-gradescope.zip"
    )
    build(course, args.assignment, out, visibility=args.visibility,
          test_visibility=args.test_visibility)  # fmt: skip
    return 0


@command(
    "gradescope-run",
    "grade /autograder/submission inside Gradescope (what run_autograder calls)",
    arg("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder")),
)
def gradescope_run(args: argparse.Namespace, course: Course) -> int:
    from autograder.integrations.gradescope import run

    return run(Path(args.root), grade=main)
