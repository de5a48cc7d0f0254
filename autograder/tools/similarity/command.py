"""Entry points: ``python -m autograder similarity`` and the section of ``grade``'s report."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from autograder.course.layout import Course
from autograder.host.intake import Submission, discover
from autograder.tools.similarity.report import write_reports
from autograder.tools.similarity.units import Builder, Unit
from autograder.tools.similarity.weighting import (
    THRESHOLD,
    CellWeights,
    Match,
    cell_weights,
    copy_groups,
    rank,
)

PASSES = 3  # weigh, find the groups of copies, weigh again with each group counted once


@dataclass
class Result:
    matches: list[Match]  # every pair compared, most similar first
    weights: dict[str, CellWeights]
    per_cell: dict[str, list[Unit]]  # the class's units (the rows of "not compared")
    threshold: float

    @property
    def flagged(self) -> list[Match]:
        return [m for m in self.matches if m.score >= self.threshold]


def by_cell(students: dict[str, dict[str, Unit]]) -> dict[str, list[Unit]]:
    per_cell: dict[str, list[Unit]] = {}
    for units in students.values():
        for key, unit in units.items():
            per_cell.setdefault(key, []).append(unit)
    return per_cell


def _folder_units(builder: Builder, folders, assignment: str, kind: str) -> dict[str, list[Unit]]:
    out: dict[str, list[Unit]] = {}
    release = list(builder.release_nbs)
    for folder in folders:
        for sub in discover(Path(folder), assignment, release):
            sub.student = f"{kind}: {Path(folder).name}/{sub.student}"
            for key, unit in builder.submission(sub, kind).items():
                if unit.comparable:
                    out.setdefault(key, []).append(unit)
    return out


def analyse(
    builder: Builder,
    submissions: list[Submission],
    *,
    past: list[Path] = (),
    background: list[Path] = (),
    threshold: float = THRESHOLD,
    library: bool = True,
) -> Result:
    """Units of every submission, the class's weights per cell, every pair ranked."""
    assignment = builder.assignment
    students = {s.student: builder.submission(s) for s in submissions}
    per_cell = by_cell(students)
    refs = builder.references() if library else {c.key: [] for c in builder.release.cells}
    for key, units in _folder_units(builder, past, assignment, "past").items():
        refs.setdefault(key, []).extend(units)
    rewrites = _folder_units(builder, background, assignment, "background")
    if not background:  # the course's independent corpus: written without the key
        rewrites = builder.rewrites()
    groups: dict[str, str] = {}
    for _ in range(PASSES):
        weights = {
            key: cell_weights(key, units, rewrites.get(key, []), groups)
            for key, units in per_cell.items()
        }
        matches = rank(students, refs, weights)
        found = copy_groups(matches, threshold)
        if found == groups:
            break
        groups = found
    return Result(matches, weights, per_cell, threshold)


def run(
    course: Course,
    assignment: str,
    submissions: list[Submission],
    out: Path,
    *,
    past: list[Path] = (),
    background: list[Path] = (),
    threshold: float = THRESHOLD,
    library: bool = True,
) -> Result:
    """Compare; write similarity.md/.html/.json into ``out``."""
    builder = Builder(course, assignment)
    result = analyse(
        builder, submissions, past=past, background=background, threshold=threshold,
        library=library,
    )  # fmt: skip
    write_reports(out, assignment, result.matches, result.weights, result.per_cell, threshold)
    return result


def report_safely(
    course: Course, assignment: str, submissions: list[Submission], out: Path
) -> None:
    """The similarity section of ``grade``'s report; a failure here never fails the grading."""
    try:
        start = time.perf_counter()
        result = run(course, assignment, submissions, out)
        print(
            f"similarity: {len(result.flagged)} pair(s) >= {THRESHOLD:g} in "
            f"{time.perf_counter() - start:.1f} s; similarity.md and similarity.html in {out}"
        )
    except Exception as error:  # noqa: BLE001 - a report, not a grade
        print(f"similarity report skipped: {type(error).__name__}: {error}", file=sys.stderr)


def main(args, course: Course) -> int:
    """``python -m autograder similarity``."""
    source = Path(args.submissions) if args.submissions else course.submitted_dir
    out = Path(args.out) if args.out else course.root / "autograder_out" / args.assignment
    release = list(course.release_notebooks(args.assignment))
    subs = discover(source, args.assignment, release)
    if not subs:
        print(f"no submissions found in {source}", file=sys.stderr)
    start = time.perf_counter()
    result = run(
        course, args.assignment, subs, out,
        past=[Path(p) for p in getattr(args, "past", None) or []],
        background=[Path(p) for p in getattr(args, "background", None) or []],
        threshold=args.threshold,
    )  # fmt: skip
    for i, m in enumerate(result.flagged, 1):
        print(f"  {i:>3}. {m.score:.2f}  {m.a} ~ {m.b} ({m.kind})")
    natural = sorted(k.split("::")[-1] for k, cw in result.weights.items() if cw.natural)
    if natural:
        print(f"  one natural form (not evidence): {', '.join(natural)}")
    print(
        f"compared {len(subs)} submission(s) in {time.perf_counter() - start:.1f} s; "
        f"{len(result.flagged)} pair(s) >= {args.threshold:g}; similarity.md and "
        f"similarity.html in {out}"
    )
    return 0
