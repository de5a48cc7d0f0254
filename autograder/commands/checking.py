"""Checking the course's own material: ``check``, ``rules``, ``selfgrade``, ``fairness``,
``mutants``, ``corpus``."""

from __future__ import annotations

import argparse
from pathlib import Path

from autograder.cli import arg, command
from autograder.commands.grading import trusted_options
from autograder.course.layout import Course, SetupError


@command(
    "check",
    "reference scores 100%%, blank 0, rerun identical",
    arg("assignment"),
    arg(
        "--samples",
        action="store_true",
        help="also grade the samples against expected.json (what selfgrade does), in one batch",
    ),
    limits=True,
)
def check(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.selfcheck import check

    return check(course, args.assignment, trusted_options(args), with_samples=args.samples)


@command(
    "corpus",
    "grade the independent correct variants under many names; any lost point fails",
    arg("assignments", nargs="*", help="one or more assignments"),
    arg("--all", action="store_true", help="every assignment with a corpus"),
    arg("--names", type=int, default=8, help="student names per variant (default 8)"),
    arg(
        "--pool",
        type=int,
        default=0,
        help="rotate each variant's --names through this many names (the corpus meets all)",
    ),
    arg("--min-variants", type=int, default=8, help="variants each graded cell needs (8)"),
    arg(
        "--trained",
        type=int,
        default=0,
        help="run the tests of a trained model (A5's train_vit) under this many of each "
        "variant's names only, rotating through the pool (default: under all)",
    ),
    arg("--out", help="folder for corpus-<name>.json (default grading/)"),
    limits=True,
)
def corpus(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.corpus import corpus, with_corpus

    names = with_corpus(course) if args.all else args.assignments
    if not names:
        raise SetupError("corpus: name one or more assignments, or --all")
    out = Path(args.out) if args.out else course.grading_dir
    return corpus(course, names, trusted_options(args), out, people=args.names, pool=args.pool,
                  min_variants=args.min_variants, trained=args.trained)  # fmt: skip


@command(
    "rules",
    "each rule the notebook states has a hidden test (suites/<name>/rules.yml)",
    arg("assignments", nargs="+"),
)
def rules(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.rules import rules

    return rules(course, args.assignments)


@command(
    "selfgrade",
    "grade reference, blank and samples against expected.json",
    arg("assignments", nargs="+"),
    arg("--out", help="where to write the rows (default grading/selfgrade.json)"),
    limits=True,
)
def selfgrade(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.selfcheck import selfgrade

    out = Path(args.out) if args.out else course.grading_dir / "selfgrade.json"
    return selfgrade(course, args.assignments, trusted_options(args), out)


@command(
    "fairness",
    "grade each sample under many names; flag varying scores",
    arg("assignments", nargs="+"),
    arg("--names", type=int, default=8, help="student names per sample (default 8)"),
    arg("--out", help="where to write the rows (default grading/fairness.json)"),
    limits=True,
)
def fairness(args: argparse.Namespace, course: Course) -> int:
    from autograder.tools.fairness import fairness

    out = Path(args.out) if args.out else course.grading_dir / "fairness.json"
    return fairness(course, args.assignments, trusted_options(args), out, names=args.names)


@command(
    "mutants",
    "grade the catalogue of usual mistakes; kill/named rates",
    arg("assignments", nargs="*", help="one or more assignments"),
    arg("--all", action="store_true", help="every assignment with a mutants.yml"),
    arg("--names", type=int, default=3, help="student names (seeds) per mutant (3)"),
    arg("--strict", action="store_true", help="fail below 100%% killed, 80%% named"),
    arg(
        "--every",
        type=int,
        default=1,
        help="all names for every N-th mistake only, the first name for the others (1: all)",
    ),
    arg("--out", help="rows (default grading/mutants-<assignment>.json)"),
    limits=True,
)
def mutants(args: argparse.Namespace, course: Course) -> int:
    from autograder.host.pool import Runners
    from autograder.tools.mutants import catalogued, mutants, overview, skipping

    names = catalogued(course) if args.all else args.assignments
    if not names or (args.out and len(names) > 1):
        raise SetupError("mutants: name one or more assignments, or --all (--out only with one)")
    options, status, outs = trusted_options(args), 0, []
    suites = [course.suite_dir(name) for name in names]
    with skipping(), Runners(course, options, suites) as runners:  # warm runners for them all
        for name in names:
            out = Path(args.out) if args.out else course.grading_dir / f"mutants-{name}.json"
            status |= mutants(course, name, options, out, names=args.names, strict=args.strict,
                              every=args.every, runners=runners)  # fmt: skip
            outs.append((name, out))
    if len(outs) > 1:
        overview(outs)
    return status
