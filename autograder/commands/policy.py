"""Release policy: ``embargo list|wheel|bundle|scan`` (what ``course.yml`` hands to students, and
a scan that no answer key reaches them)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.cli import arg, command
from autograder.course.layout import Course, SetupError

SUBCOMMANDS = {
    "list": ("the schedule and each assignment's answer key", ()),
    "wheel": (
        "build the public wheel of course_lib",
        (arg("--out", type=Path, default=Path("dist/student")),),
    ),
    "bundle": (
        "build dist/student/ and dist/student.zip",
        (
            arg("--out", type=Path, default=Path("dist/student")),
            arg("--book", type=Path, default=None, help="a built book (html)"),
        ),
    ),
    "scan": (
        "statements of an answer key in files (exit 1 if any)",
        (arg("paths", type=Path, nargs="+"),),
    ),
}


@command(
    "embargo",
    "the release policy: list the schedule, build the public wheel or the student bundle, scan "
    "for answer keys",
    arg("--schedule", type=Path, default=None, help="default: <course>/course.yml"),
    subcommands=SUBCOMMANDS,
)
def embargo(args: argparse.Namespace, course: Course) -> int:
    from autograder.course.embargo import ScheduleError, build_bundle, build_wheel, plan, scan

    try:
        p = plan(course.root, args.schedule)
    except ScheduleError as error:
        raise SetupError(str(error)) from error
    if args.subcommand == "list":
        for a in p.assignments:
            print(f"{a.label} {a.name}: {a.state}")
            scanned = "not scanned for" if a.state == "solutions-released" else "scanned for"
            print(f"  key {p.keys[a.name].relative_to(p.root)} ({scanned})")
    elif args.subcommand == "wheel":
        print(build_wheel(p.root, args.out))
    elif args.subcommand == "bundle":
        archive = build_bundle(p, args.out, args.book)
        hits = scan(p, [args.out])
        for hit in hits:
            print(f"leak: {hit}", file=sys.stderr)
        print(f"wrote {args.out}/ and {archive}")
        return 1 if hits else 0
    elif args.subcommand == "scan":
        hits = scan(p, args.paths)
        print("\n".join(hits) or "no statement of an answer key found")
        return 1 if hits else 0
    return 0
