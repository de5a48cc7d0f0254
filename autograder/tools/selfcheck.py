"""``check`` and ``selfgrade``: does an assignment's hidden suite grade what it should?

``check <assignment>``: the suite is consistent with the release (every test names a grade cell of
the notebook, the points per cell add up), the reference solution scores 100 %, the blank
release scores 0, and grading the reference again gives identical per-test results. With
``--samples`` it also grades the samples against ``expected.json`` in the same batch (what
``selfgrade`` does for them, without grading the reference and the blank a second time).

``selfgrade <assignments...>``: grades the reference, the blank release and every sample in
``autograder/samples/<assignment>/`` and compares with ``expected.json``, which maps a sample's
name (file or folder name without ``.ipynb``) to its expected score::

    {"partial": 50, "cheat": 0, "broken": {"points": 2}}

A number is a percentage of the autograded points; ``{"points": x}`` is absolute. ``reference``
and ``blank`` default to 100 and 0. The rows go to ``grading/selfgrade.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autograder.course.layout import Course, SetupError
from autograder.host.grader import Grader
from autograder.host.intake import Submission, discover
from autograder.host.options import Options
from autograder.host.pool import Runners

TOLERANCE = 1e-6


def consistency(grader: Grader) -> list[str]:
    problems = []
    release = list(grader.release)
    sums: dict[tuple[str, str], float] = {}
    for test in grader.tests:
        notebook = test.get("notebook") or release[0]
        if notebook not in grader.release:
            problems.append(f"{test['nodeid']}: notebook {notebook!r} is not in the release")
            continue
        key = (notebook, test["cell"])
        cell = grader.grade_cells.get(key)
        if cell is None:
            problems.append(
                f"{test['nodeid']}: grade cell {test['cell']!r} does not exist in {notebook}"
            )
        elif not cell.autograded:
            problems.append(f"{test['nodeid']}: grade cell {test['cell']!r} is manually graded")
        sums[key] = sums.get(key, 0.0) + test["points"]
    for key, cell in grader.grade_cells.items():
        if not cell.autograded:
            continue
        total = sums.get(key, 0.0)
        if abs(total - cell.points) > TOLERANCE:
            problems.append(
                f"grade cell {cell.grade_id!r} in {cell.notebook} is worth {cell.points:g} points "
                f"but its hidden tests add up to {total:g}"
            )
    return problems


def reference_submission(course: Course, assignment: str, release: list[str]) -> Submission:
    paths = {p.name: p for p in course.source_notebooks(assignment)}
    notebooks = {name: paths.get(name) for name in release}
    return Submission("reference", notebooks, list(paths.values()), course.source_dir(assignment))


def blank_submission(course: Course, assignment: str, release: list[str]) -> Submission:
    folder = course.release_dir(assignment)
    notebooks = {name: folder / name for name in release}
    return Submission("blank", notebooks, list(notebooks.values()), folder)


def samples(course: Course, assignment: str, release: list[str]) -> tuple[list[Submission], dict]:
    folder = course.samples_dir(assignment)
    if not folder.is_dir():
        return [], {}
    expected_path = folder / "expected.json"
    expected = json.loads(expected_path.read_text()) if expected_path.exists() else {}
    found = [
        s
        for s in discover(folder, assignment, release)
        # expected.json, samples.yml (the patches the samples are built from), a README, the
        # independent corpus (variants as patches: `python -m autograder corpus` grades them)
        if s.student not in ("expected", "samples", "independent")
        and not s.student.lower().startswith("readme")
    ]
    return found, expected


def expected_points(spec: object, max_score: float) -> float | None:
    if spec is None:
        return None
    if isinstance(spec, dict):
        if "points" in spec:
            return float(spec["points"])
        if "percent" in spec:
            return float(spec["percent"]) * max_score / 100
        return None
    return float(spec) * max_score / 100


def print_table(rows: list[dict]) -> None:
    print(f"{'assignment':<22} {'submission':<22} {'score':>13} {'expected':>9}  ok")
    for r in rows:
        exp = r["expected"] if isinstance(r["expected"], str) else f"{r['expected']:g}"
        mark = "ok" if r["ok"] else "MISMATCH"
        print(
            f"{r['assignment']:<22} {r['submission']:<22} "
            f"{r['score']:>6g}/{r['max_score']:<6g} {exp:>9}  {mark}"
        )
        if not r["ok"] and r.get("details"):
            for line in r["details"]:
                print(f"      {line}")


def _details(row: dict) -> list[str]:
    out = [row["reason"]] if row["reason"] else []
    for t in row["tests"].values():
        if t["status"] != "passed":
            out.append(f"{t['nodeid']}: {t['message'].splitlines()[0] if t['message'] else ''}")
    return out[:12]


def check(course: Course, assignment: str, options: Options, *, with_samples: bool = False) -> int:
    from autograder.tools.rules import print_table as print_rules
    from autograder.tools.rules import problems_and_table

    with Grader(course, assignment, options) as grader:
        problems = consistency(grader)
        rule_problems, rule_rows = problems_and_table(course, assignment)
        problems += rule_problems
        release = list(grader.release)
        ref = reference_submission(course, assignment, release)
        if not any(ref.notebooks.values()):
            problems.append(f"no reference solution in {course.source_dir(assignment)}")
        extra, expected = samples(course, assignment, release) if with_samples else ([], {})
        rows = grader.grade([ref, blank_submission(course, assignment, release), ref, *extra])
        print(
            f"sandbox: {grader.sandbox_report.get('network')}; "
            f"{grader.sandbox_report.get('filesystem')}; uid {grader.sandbox_report.get('uid')}"
        )
    first, blank, again = rows[:3]
    table = []
    for name, row, want in (("reference", first, row_max(first)), ("blank", blank, 0.0)):
        ok = abs(row["score"] - want) <= TOLERANCE
        table.append(_table_row(assignment, name, row, want, ok))
    same = {k: (v["points"], v["status"]) for k, v in first["tests"].items()} == {
        k: (v["points"], v["status"]) for k, v in again["tests"].items()
    }
    table.append(_table_row(assignment, "reference (rerun)", again, first["score"], same))
    if with_samples:
        table += compare(assignment, extra, rows[3:], expected)
    print_table(table)
    print_rules(assignment, rule_rows)
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    ok = all(r["ok"] for r in table) and not problems
    print(f"check {assignment}: {'passed' if ok else 'FAILED'}")
    return 0 if ok else 1


def row_max(row: dict) -> float:
    return row["max_score"]


def _table_row(assignment: str, name: str, row: dict, expected: float | None, ok: bool) -> dict:
    out = {
        "assignment": assignment,
        "submission": name,
        "score": row["score"],
        "max_score": row["max_score"],
        "percent": row["percent"],
        "expected": "-" if expected is None else round(expected, 6),  # "-": none given
        "ok": bool(ok),
        "reason": row["reason"],
    }
    if not ok:
        out["details"] = _details(row)
    return out


def selfgrade(course: Course, names: list[str], options: Options, out: Path) -> int:
    table: list[dict] = []
    suites = [course.suite_dir(a) for a in names]
    with Runners(course, options, suites) as runners:
        _selfgrade(course, names, options, runners, table)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=1))
    print_table(table)
    bad = [r for r in table if not r["ok"]]
    print(f"self-grade: {len(table) - len(bad)}/{len(table)} as expected (details in {out})")
    return 1 if bad else 0


def _selfgrade(
    course: Course, names: list[str], options: Options, runners: Runners, table: list[dict]
) -> None:
    for assignment in names:
        try:
            with Grader(course, assignment, options, runners=runners) as grader:
                release = list(grader.release)
                subs = [
                    reference_submission(course, assignment, release),
                    blank_submission(course, assignment, release),
                ]
                extra, expected = samples(course, assignment, release)
                rows = grader.grade(subs + extra)
        except (SetupError, RuntimeError) as error:  # no suite, no release, a broken suite
            reason = str(error)
            table.append(
                {"assignment": assignment, "submission": "(cannot grade)", "score": 0.0,
                 "max_score": 0.0, "percent": 0.0, "expected": "-", "ok": False,
                 "reason": reason, "details": reason.splitlines()[:12]}
            )  # fmt: skip
            continue
        table += compare(assignment, subs + extra, rows, expected)


def compare(
    assignment: str, subs: list[Submission], rows: list[dict], expected: dict
) -> list[dict]:
    """One table row per graded submission against ``expected.json`` (reference 100, blank 0
    by default), and one per name in ``expected.json`` that has no sample."""
    table = []
    for sub, row in zip(subs, rows):
        default = {"reference": 100, "blank": 0}.get(sub.student)
        want = expected_points(expected.get(sub.student, default), row["max_score"])
        ok = want is not None and abs(row["score"] - want) <= 1e-3
        table.append(_table_row(assignment, sub.student, row, want, ok))
        if want is None:
            table[-1]["details"] = [f"no expected score for {sub.student!r} in expected.json"]
    unknown = sorted(set(expected) - {s.student for s in subs} - {"reference", "blank"})
    for name in unknown:
        table.append(
            {"assignment": assignment, "submission": name, "score": 0.0, "max_score": 0.0,
             "percent": 0.0, "expected": "-", "ok": False,
             "reason": "listed in expected.json but no such sample",
             "details": ["listed in expected.json but no such sample"]}
        )  # fmt: skip
    return table
