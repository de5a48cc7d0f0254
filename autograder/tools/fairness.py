"""``fairness``: does the same submission get the same score whoever submits it?

Each test draws its inputs from a seed derived from the assignment, the *student* and the test, so
a mistake that only shows on some inputs (``sqrt(D)`` and ``D`` agree at ``D = 1``) can score
differently per student. ``selfgrade`` grades every sample under one name and cannot see it.
``python -m autograder fairness <assignments...> --names 8`` grades the reference, the blank
release and every sample under ``--names`` student names and flags each one whose score (or
per-test result) varies; the rows go to ``grading/fairness.json``. Exit status 1 when any varies.
"""

from __future__ import annotations

import json
from pathlib import Path

from autograder.course.layout import Course
from autograder.host.grader import Grader
from autograder.host.options import Options
from autograder.host.pool import Runners
from autograder.tools.selfcheck import blank_submission, reference_submission, samples

TOLERANCE = 1e-6


def student_names(n: int) -> list[str]:
    """``n`` plausible, fixed student ids (fixed: a rerun draws the same inputs)."""
    first = ("ada", "ben", "chen", "dana", "eli", "fatima", "gus", "hana", "ivan", "jo", "kofi",
             "lea", "mo", "nia", "omar", "pia")  # fmt: skip
    return [f"{first[i % len(first)]}{i // len(first) or ''}_{1000 + 37 * i}" for i in range(n)]


def spread(rows: list[dict]) -> dict:
    scores = [r["score"] for r in rows]
    varying = sorted(
        nodeid
        for nodeid in rows[0]["tests"]
        if len({round(r["tests"][nodeid]["points"], 6) for r in rows}) > 1
    )
    return {
        "min": min(scores),
        "max": max(scores),
        "scores": {r["student"]: r["score"] for r in rows},
        "varying_tests": varying,
        "fair": max(scores) - min(scores) <= TOLERANCE and not varying,
    }


def fairness(
    course: Course, assignments: list[str], options: Options, out: Path, *, names: int = 8
) -> int:
    table: list[dict] = []
    people = student_names(max(2, names))
    with Runners(course, options, [course.suite_dir(a) for a in assignments]) as runners:
        for assignment in assignments:
            with Grader(course, assignment, options, runners=runners) as grader:
                release = list(grader.release)
                subs = [
                    reference_submission(course, assignment, release),
                    blank_submission(course, assignment, release),
                    *samples(course, assignment, release)[0],
                ]
                rows = grader.grade(subs, names=people)
            for i, sub in enumerate(subs):
                group = rows[i * len(people) : (i + 1) * len(people)]
                table.append(
                    {"assignment": assignment, "submission": sub.student,
                     "max_score": group[0]["max_score"], **spread(group)}
                )  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=1))
    print(f"{'assignment':<22} {'submission':<22} {'min':>6} {'max':>6} / max   fair")
    for r in table:
        mark = "ok" if r["fair"] else "VARIES"
        print(
            f"{r['assignment']:<22} {r['submission']:<22} {r['min']:>6g} {r['max']:>6g} "
            f"/ {r['max_score']:<5g} {mark}"
        )
        if not r["fair"]:
            print(f"      varying tests: {', '.join(r['varying_tests']) or '(total only)'}")
    unfair = [r for r in table if not r["fair"]]
    print(
        f"fairness: {len(table) - len(unfair)}/{len(table)} submissions score the same under "
        f"{len(people)} names (details in {out})"
    )
    return 1 if unfair else 0
