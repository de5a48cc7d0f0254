"""Release policy: ``embargo list|wheel|bundle|scan`` (what ``course.yml`` keeps from students)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.cli import arg, command
from autograder.course.layout import Course, SetupError

SUBCOMMANDS = {
    "list": ("the schedule and the embargoed objects", ()),
    "wheel": (
        "build the student wheel",
        (arg("--out", type=Path, default=Path("dist/student")),),
    ),
    "bundle": (
        "build dist/student/ and dist/student.zip",
        (
            arg("--out", type=Path, default=Path("dist/student")),
            arg("--book", type=Path, default=None, help="a built student edition (html)"),
        ),
    ),
    "scan": (
        "embargoed statements in files (exit 1 if any)",
        (arg("paths", type=Path, nargs="+"),),
    ),
}


@command(
    "embargo",
    "the release policy: list the embargo, build the student wheel or bundle, scan for leaks",
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
        for item in sorted(p.embargoed.values(), key=lambda i: (i.assignment, i.dotted)):
            print(f"  embargoed {item.dotted}  ({item.where})")
        for note in p.notes:
            print(f"  note: {note}")
    elif args.subcommand == "wheel":
        print(build_wheel(p, args.out))
    elif args.subcommand == "bundle":
        archive = build_bundle(p, args.out, args.book)
        hits = scan(p, [args.out])
        for hit in hits:
            print(f"leak: {hit}", file=sys.stderr)
        print(f"wrote {args.out}/ and {archive}")
        return 1 if hits else 0
    elif args.subcommand == "scan":
        hits = scan(p, args.paths)
        print("\n".join(hits) or "no embargoed statement found")
        return 1 if hits else 0
    return 0
