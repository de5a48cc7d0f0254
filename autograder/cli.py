"""The one command line: ``python -m autograder <command> ...``.

Run from the course folder (the one holding ``nbgrader_config.py``) or pass ``--course-dir``.
``python -m autograder --help`` lists the commands; ``python -m autograder <command> --help`` their
options.

Commands register themselves: each module of :mod:`autograder.commands` declares its commands
with :func:`command` (a name, a one-line help, its arguments and a function ``run(args, course)``
that returns the exit status). This module is the only place that turns errors into exit statuses:
code below it raises :class:`~autograder.course.layout.SetupError` (a problem with the course's
files or the arguments, printed as ``error: ...``, status 2) and never exits itself.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autograder.course.layout import Course, SetupError, find_course


def arg(*flags: str, **options: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    """One ``add_argument`` call, written where the command is declared."""
    return flags, options


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    run: Callable[[argparse.Namespace, Course], int]
    arguments: tuple = ()
    limits: bool = False  # takes the grading limits (--jobs, --timeout, ...; defaults in Options)
    subcommands: dict[str, tuple] = field(default_factory=dict)  # name -> (help, arguments)


REGISTRY: dict[str, Command] = {}


def command(
    name: str,
    help: str,
    *arguments: tuple,
    limits: bool = False,
    subcommands: dict[str, tuple] | None = None,
) -> Callable:
    """Register ``run(args, course) -> int`` as ``python -m autograder <name>``."""

    def register(run: Callable[[argparse.Namespace, Course], int]) -> Callable:
        if name in REGISTRY:
            raise ValueError(f"two commands are named {name!r}")
        REGISTRY[name] = Command(name, help, run, arguments, limits, subcommands or {})
        return run

    return register


def add_limits(p: argparse.ArgumentParser) -> None:
    """The grading limits; their defaults are :class:`~autograder.host.options.Options`'s."""
    from autograder.host.options import Options

    d = Options.from_environment()
    p.add_argument("--jobs", type=int, default=d.jobs, help="parallel runners (%(default)s)")
    p.add_argument("--timeout", type=float, default=d.timeout, help="CPU s per call (%(default)s)")
    p.add_argument(
        "--wall", type=float, default=d.wall, help="seconds per submission (%(default)s)"
    )
    p.add_argument(
        "--load-timeout", type=float, default=d.load_timeout, help="seconds to load the code"
    )
    p.add_argument("--cpu", type=int, default=d.cpu, help="CPU s per worker (%(default)s)")
    p.add_argument(
        "--memory-gib", type=float, default=d.memory_gib, help="address space per worker, >= 4"
    )
    p.add_argument(
        "--sandbox",
        choices=("auto", "namespace", "fallback"),
        default=d.sandbox,
        help="namespaces (auto, the default: refuses where they are not available; namespace "
        "is the same) or fallback, asked for by name (also AUTOGRADER_SANDBOX=fallback)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _load_commands() -> None:
    import autograder.commands as package

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")


def parser() -> argparse.ArgumentParser:
    _load_commands()
    top = argparse.ArgumentParser(
        prog="python -m autograder",
        description="The course's grader and the instructor's tools.",
        epilog="Run from the course folder or pass --course-dir.",
    )
    top.add_argument("--course-dir", help="the course folder (default: here, or this repo)")
    sub = top.add_subparsers(dest="command", required=True, metavar="<command>")
    for name in sorted(REGISTRY):
        c = REGISTRY[name]
        p = sub.add_parser(name, help=c.help, description=c.help)
        for flags, options in c.arguments:
            p.add_argument(*flags, **options)
        if c.limits:
            add_limits(p)
        if c.subcommands:
            inner = p.add_subparsers(dest="subcommand", required=True)
            for sub_name, (sub_help, sub_arguments) in c.subcommands.items():
                q = inner.add_parser(sub_name, help=sub_help)
                for flags, options in sub_arguments:
                    q.add_argument(*flags, **options)
        p.set_defaults(run=c.run)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        course = Course(find_course(args.course_dir))
        return args.run(args, course)
    except SetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:
        if "sandbox failed to start" not in str(error):
            raise
        print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)  # no namespaces, say
        return 3  # how to proceed: a grader-side fault, not a student's
