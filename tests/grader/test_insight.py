"""``python -m autograder insight``: the class report counts what the class did.

A synthetic A2 class of 40 is graded from the reference, the blank release, the partial sample and
four catalogued mistakes in known numbers; the report's named mistakes must have exactly those
counts (the partial sample holds ``bilinear_divided_by_dk`` too), no student name may appear on the
default page, and the page must stand alone: no script, no external request.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from time_limits import run

from autograder.course.layout import Course
from autograder.tools.authoring import notebook_text, source_path, submission, to_notebook
from autograder.tools.mutants import load_catalogue

ROOT = Path(__file__).resolve().parents[2]
COURSE = Course(ROOT)
A2 = "a2_self_attention"
GRADER = [sys.executable, "-m", "autograder", "--course-dir", str(ROOT)]
CLASS = {  # what each student hands in -> how many students
    "reference": 10,
    "blank": 5,
    "partial": 5,
    "bilinear_divided_by_dk": 6,
    "additive_no_tanh": 5,
    "bilinear_w_transposed": 5,
    "additive_tanh_after_w": 4,
}
MISTAKES = [m for m in CLASS if m not in ("reference", "blank", "partial")]
pytestmark = pytest.mark.xdist_group("insight")  # one worker grades the class, once


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("insight")
    source = to_notebook(source_path(COURSE, A2).read_text(encoding="utf-8"), A2)
    catalogue = load_catalogue(COURSE, A2)
    notebooks = {
        "reference": notebook_text(submission(source, {}, "reference")),
        "blank": (COURSE.release_dir(A2) / f"{A2}.ipynb").read_text(encoding="utf-8"),
        "partial": (COURSE.samples_dir(A2) / "partial.ipynb").read_text(encoding="utf-8"),
        **{m: notebook_text(submission(source, catalogue[m]["cells"], m)) for m in MISTAKES},
    }
    subs = tmp / "submitted"
    subs.mkdir()
    who: dict[str, str] = {}
    number = 0
    for kind, count in CLASS.items():
        for _ in range(count):
            number += 1
            student = f"student{number:02d}_secretname"
            who[student] = kind
            (subs / f"{student}.ipynb").write_text(notebooks[kind], encoding="utf-8")
    # the mistakes' signatures: the catalogue graded once (what `mutants` writes)
    mutants_json = tmp / "mutants.json"
    out = run([*GRADER, "mutants", A2, "--names", "1", "--jobs", "2", "--quiet",
               "--out", str(mutants_json)], cpu=1200)  # fmt: skip
    assert mutants_json.exists(), out.stdout[-3000:] + out.stderr[-3000:]
    out = run([*GRADER, "grade", A2, "--submissions", str(subs), "--out", str(tmp / "out"),
               "--no-gradebook", "--jobs", "2", "--quiet"], cpu=1800)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return tmp, subs, mutants_json, who


def test_the_report_counts_each_named_mistake_as_the_class_made_it(graded_class):
    tmp, subs, mutants_json, _ = graded_class
    out = run([*GRADER, "insight", A2, "--out", str(tmp / "out"), "--submissions", str(subs),
               "--mutants", str(mutants_json)], cpu=600)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    data = json.loads((tmp / "out" / "insight.json").read_text())
    # mistakes that fail the same tests of a step are one group ("a or b or c"): each planted
    # mistake is in exactly one group, whose count is the students who made one of its mistakes
    # (the partial sample divides by D_k in bilinear_scores too)
    for mistake in MISTAKES:
        groups = [m for m in data["mistakes"] if mistake in m["mistakes"]]
        assert len(groups) == 1, (mistake, data["mistakes"])
        group = groups[0]
        want = sum(CLASS[m] for m in MISTAKES if m in group["mistakes"])
        want += CLASS["partial"] if "bilinear_divided_by_dk" in group["mistakes"] else 0
        assert group["count"] == want, (mistake, group, data["other_failures"])
    assert data["graded"] == sum(CLASS.values())
    assert data["total"]["full"] == CLASS["reference"]
    assert data["total"]["blank"] == CLASS["blank"]
    not_attempted = [f for f in data["other_failures"] if f["message"].startswith("not attempt")]
    assert not_attempted and all(f["count"] == CLASS["blank"] for f in not_attempted)
    top = data["mistakes"][0]
    assert "bilinear_divided_by_dk" in top["mistakes"] and len(top["examples"]) == 2
    assert "def bilinear_scores" in top["examples"][0]["code"]


def test_the_default_page_names_nobody_and_stands_alone(graded_class):
    tmp, subs, mutants_json, who = graded_class
    run([*GRADER, "insight", A2, "--out", str(tmp / "out"), "--submissions", str(subs),
         "--mutants", str(mutants_json)], cpu=600, check=True)  # fmt: skip
    page = (tmp / "out" / "insight.html").read_text()
    data = (tmp / "out" / "insight.json").read_text()
    for text in (page, data):
        assert "secretname" not in text
    assert "<script" not in page.lower()
    for attribute in ("src=", "href="):
        for part in page.split(attribute)[1:]:
            assert not part.lstrip("'\"").startswith(("http:", "https:", "//")), part[:80]
    assert page.count("<svg") >= 3 and 'role="img"' in page and "aria-label=" in page
    assert "To re-teach first" in page
    # with --names the instructor sees who
    run([*GRADER, "insight", A2, "--out", str(tmp / "out"), "--submissions", str(subs),
         "--mutants", str(mutants_json), "--names"], cpu=600, check=True)  # fmt: skip
    assert "secretname" in (tmp / "out" / "insight.html").read_text()


def test_the_page_renders_in_chromium(graded_class, tmp_path):
    tmp, subs, mutants_json, _ = graded_class
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is not installed (apt-get install chromium)")
        pytest.skip("chromium is not installed")
    run([*GRADER, "insight", A2, "--out", str(tmp / "out"), "--submissions", str(subs),
         "--mutants", str(mutants_json)], cpu=600, check=True)  # fmt: skip
    dom = subprocess.run(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
         (tmp / "out" / "insight.html").as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "What the class got wrong" in dom.stdout, dom.stderr[-2000:]
    assert dom.stdout.count("<svg") >= 3


def test_insight_over_several_assignments_draws_the_trajectory(graded_class, tmp_path):
    tmp, subs, mutants_json, _ = graded_class
    for name in ("a2_self_attention", "a1_rnn_attention"):
        (tmp_path / name).mkdir()
        report = json.loads((tmp / "out" / "report.json").read_text())
        report["assignment"] = name
        (tmp_path / name / "report.json").write_text(json.dumps(report))
    out = run([*GRADER, "insight", "a1_rnn_attention", "a2_self_attention",
               "--out", str(tmp_path)], cpu=600)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    page = (tmp_path / "insight-term.html").read_text()
    assert "The class over the term" in page and "<svg" in page and "a1_rnn_attention" in page


def test_mistakes_that_fail_the_same_tests_are_told_apart_by_their_messages(tmp_path):
    """Two catalogued mistakes fail the same test; the messages the hidden test gave them (numbers
    out) differ, so a student's failure is named as the one whose message it repeats. Mistakes
    whose messages are alike too stay one group ("a or b")."""
    from autograder.tools.insight import analyse

    test = "test_a2_self_attention.py::test_bilinear_scores_square_w_and_gradients"
    table = [
        {"mutant": "bilinear_not_scaled", "failed_tests": [test],
         "failures": {test: "alice: the scores are 8.0 times too large at index [0, 1]"}},
        {"mutant": "bilinear_divided_by_dk", "failed_tests": [test],
         "failures": {test: "alice: wrong values in the scores: largest difference 0.5"}},
        {"mutant": "bilinear_scaled_by_number_of_keys", "failed_tests": [test],
         "failures": {test: "alice: wrong values in the scores: largest difference 2.25"}},
    ]  # fmt: skip
    mutants_json = tmp_path / "mutants.json"
    mutants_json.write_text(json.dumps(table))

    def row(student: str, message: str) -> dict:
        failed = {"points": 0.0, "max_points": 1.0, "message": message, "cell": "check_bilinear"}
        return {"student": student, "status": "graded", "score": 0.0, "max_score": 1.0,
                "tests": {test: failed}, "cells": {}}  # fmt: skip

    report = {
        "tests": [{"nodeid": test, "cell": "check_bilinear"}],
        "rows": [
            row("s1", "the scores are 3.5 times too large at index [2, 0]"),
            row("s2", "the scores are 3.5 times too large at index [1, 1]"),
            row("s3", "wrong values in the scores: largest difference 0.125"),
        ],
    }
    data = analyse(COURSE, A2, report, mutants_json=mutants_json)
    groups = {tuple(m["mistakes"]): m["count"] for m in data["mistakes"]}
    assert groups == {
        ("bilinear_not_scaled",): 2,
        ("bilinear_divided_by_dk", "bilinear_scaled_by_number_of_keys"): 1,
    }, data["mistakes"]
