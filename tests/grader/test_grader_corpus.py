"""The cheat corpus: every submission in tests/grader/fixtures/grader/corpus.py gets its expected
score.

One ``python -m autograder grade`` run over ~45 submissions (cheats, crashes, bad files) against
the fixture assignment, in nbgrader's layout, writing the gradebook; then assertions on its
outputs: scores, reasons, SHA-256s, originals untouched, nothing leaked (canary), no network
connection made, the hidden suite intact, nbgrader's generate_feedback and export working.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import socket
import sys
import threading
from pathlib import Path

import pytest
import time_limits

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "grader"))
import corpus  # noqa: E402

pytestmark = pytest.mark.slow
CANARY = "CANARY-HIDDEN-5e1f0c9a"


class Listener:
    """A local TCP server that records any connection (there must be none)."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.connections: list = []
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            try:
                self.connections.append(self.server.accept())
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.thread.join()
        self.server.close()


# nbgrader's bookkeeping, added (never overwritten) where a copied-in submission lacks it
BOOKKEEPING = {"timestamp.txt", "submission_secret.txt"}


def _digest(folder: Path) -> dict[str, list]:
    """What the students submitted: every file but nbgrader's added bookkeeping."""
    return {
        str(p.relative_to(folder)): [hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime]
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in BOOKKEEPING
    }


def _grade_corpus(folder: Path) -> dict:
    root = corpus.make_course(folder / "course", cache=folder.parent / "release")
    hidden = root / "autograder" / "suites" / corpus.ASSIGNMENT / "test_fx_attention.py"
    hidden_before = hashlib.sha256(hidden.read_bytes()).hexdigest()
    listener = Listener()
    plain = folder / "plain"
    expected = corpus.build_corpus(
        root / "assignments" / corpus.ASSIGNMENT / corpus.NOTEBOOK,
        plain,
        hidden_file=hidden,
        port=listener.port,
        course_root=root,
    )
    # nbgrader's layout: grading/submitted/<student>/<assignment>/<files>
    submitted = root / "grading" / "submitted"
    for entry in sorted(plain.iterdir()):
        target = submitted / (entry.stem if not entry.is_dir() else entry.name) / corpus.ASSIGNMENT
        if entry.is_symlink():  # kept a link, to the instructor's source notebook
            target.mkdir(parents=True)
            (target / corpus.NOTEBOOK).symlink_to(entry.resolve())
        elif entry.is_file():
            target.mkdir(parents=True)
            name = corpus.NOTEBOOK if entry.suffix == ".ipynb" else entry.name
            (target / name).write_bytes(entry.read_bytes())
        elif (entry / corpus.ASSIGNMENT).is_dir():
            shutil.copytree(entry / corpus.ASSIGNMENT, target)
        else:  # mixed layouts: a per-student folder (no assignment folder) among nested ones
            shutil.copytree(entry, target.parent)
    before = _digest(submitted)
    out = root / "out"
    run = corpus.cli(
        "--course-dir", str(root), "grade", corpus.ASSIGNMENT, "--out", str(out),
        "--timeout", "2", "--load-timeout", "3", "--jobs", "2", "--quiet", check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    listener.close()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    nbgrader = []  # nbgrader's own tools on the grader's gradebook and autograded notebooks
    for args in (
        ["generate_feedback", corpus.ASSIGNMENT, "--student", "nan_gradients"],
        ["generate_feedback", corpus.ASSIGNMENT, "--student", "html_injection"],
        ["export"],
    ):
        done = time_limits.run(
            [sys.executable, "-m", "nbgrader", *args],
            cwd=root, env=env, capture_output=True, text=True, cpu=600,
        )  # fmt: skip
        nbgrader.append((args, done.returncode, done.stdout[-2000:] + done.stderr[-2000:]))
    return {
        "nbgrader": nbgrader,
        "root": str(root),
        "stdout": run.stdout,
        "expected": expected,
        "before": before,
        "connections": len(listener.connections),
        "returncode": run.returncode,
        "hidden_before": hidden_before,
    }


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """The corpus graded once per test run (shared by xdist workers through files)."""
    info = corpus.once(corpus.shared_dir(tmp_path_factory, "corpus"), _grade_corpus)
    root = Path(info["root"])
    report = json.loads((root / "out" / "report.json").read_text())
    hidden = root / "autograder" / "suites" / corpus.ASSIGNMENT / "test_fx_attention.py"
    return {
        **info,
        "root": root,
        "out": root / "out",
        "report": report,
        "rows": {r["student"]: r for r in report["rows"]},
        "submitted": root / "grading" / "submitted",
        "hidden": hidden,
    }


def test_every_submission_gets_a_row(graded):
    assert set(graded["rows"]) == set(graded["expected"]) == set(corpus.EXPECTED_NAMES)
    assert "sandbox:" in graded["stdout"]


@pytest.mark.parametrize("name", sorted(corpus.EXPECTED_NAMES))
def test_expected_score(graded, name):
    row, want = graded["rows"][name], graded["expected"][name]
    if name in corpus.NAMESPACE_ONLY and not corpus.NAMESPACES:
        pytest.skip("fallback sandbox: cannot promise this (and says so)")
    failures = {k: v["message"][:200] for k, v in row["tests"].items() if v["status"] != "passed"}
    assert row["score"] == pytest.approx(want["points"]), (
        f"{name} ({want['why']}): got {row['score']}, reason {row['reason']}, "
        f"failures {failures}, notes {row['notes']}"
    )
    assert row["max_score"] == corpus.MAX_POINTS
    if want.get("error"):
        assert row["status"] == "error" and row["reason"]
    if want.get("status"):
        assert row["status"] == want["status"] and row["reason"], (name, row["status"])


def test_reasons_are_specific(graded):
    rows = graded["rows"]
    assert "invalid JSON" in rows["malformed_json"]["reason"]
    assert "PNG" in rows["not_a_notebook"]["reason"]
    assert "empty" in rows["empty"]["reason"]
    assert "format 3" in rows["old_format"]["reason"]
    assert "answers.pdf" in rows["answers"]["reason"]
    assert "not submitted" in rows["missing"]["reason"]
    notes = "\n".join(rows["shadowing"]["notes"])
    assert "course_lib.py" in notes and "autograder.py" in notes
    assert any("UTF-8" in n for n in rows["non_utf8"]["notes"])
    assert any("syntax error" in n for n in rows["syntax_error"]["notes"])
    assert any("more than once" in n for n in rows["duplicated_cells"]["notes"])
    assert any("was edited" in n for n in rows["edited_cells"]["notes"])

    def messages(name):
        return "\n".join(t["message"] for t in rows[name]["tests"].values())

    assert "did not finish" in messages("infinite_loop")
    assert "exit code 3" in messages("os_exit")
    assert "sys.exit" in messages("sys_exit")
    assert "forbidden" in messages("sdpa_getattr") and "scaled_dot_product" in messages(
        "sdpa_getattr"
    )
    assert "MultiheadAttention" in messages("via_multihead_attention")
    assert "course_lib" in messages("course_lib_hidden_import")
    assert "monkeypatching" in messages("cheat_allclose_inside")
    assert "grader" in messages("cheat_grader_api")
    assert "loading your code failed" in messages("load_loop")


def test_only_in_flight_tests_lose_points_when_a_worker_dies(graded):
    for name in ("os_exit", "infinite_loop", "self_kill", "memory_bomb", "fork_bomb"):
        tests = graded["rows"][name]["tests"]
        for nodeid, result in tests.items():
            assert (result["status"] == "passed") == ("multihead" in nodeid), (name, nodeid)


def test_sha256_recorded_and_originals_untouched(graded):
    assert _digest(graded["submitted"]) == graded["before"]
    row = graded["rows"]["reference"]
    path = graded["submitted"] / "reference" / corpus.ASSIGNMENT / corpus.NOTEBOOK
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert row["notebooks"][corpus.NOTEBOOK]["sha256"] == digest
    assert row["files"][0]["sha256"] == digest
    assert graded["rows"]["malformed_json"]["files"][0]["sha256"]


def test_nothing_escaped_the_sandbox(graded):
    assert graded["connections"] == 0
    assert hashlib.sha256(graded["hidden"].read_bytes()).hexdigest() == graded["hidden_before"]
    assert not (graded["root"] / "PWNED.txt").exists()
    assert graded["rows"]["network"]["score"] == corpus.MAX_POINTS


def test_grades_csv_has_one_column_per_test(graded):
    with open(graded["out"] / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    tests = [t["nodeid"] for t in graded["report"]["tests"]]
    assert len(tests) == 7 and all(t in rows[0] for t in tests)
    by_student = {r["student"]: r for r in rows}
    assert float(by_student["partial"]["score"]) == 4
    assert by_student["partial"]["test_fx_attention.py::test_attention_values"] == "1"
    assert by_student["partial"]["test_fx_attention.py::test_multihead_matches_torch"] == "0"


def test_feedback_and_gradescope_results(graded):
    folder = graded["out"] / "feedback" / "wrong_scale"
    text = (folder / "feedback.md").read_text()
    assert "divided by D" in text and "test_attention_values" in text
    results = json.loads((folder / "results.json").read_text())
    assert results["score"] == 1 and len(results["tests"]) == 7
    assert {t["status"] for t in results["tests"]} == {"passed", "failed"}
    nan = graded["rows"]["nan_gradients"]["tests"]
    # the canary sits on an assert without a message: the student sees a generic message
    assert nan["test_fx_attention.py::test_attention_gradients"]["message"] == (
        "a check failed (no message)"
    )


def test_scores_are_in_nbgrader_and_its_tools_work(graded):
    from nbgrader.api import Gradebook

    root = graded["root"]
    db = f"sqlite:///{root / 'grading' / 'gradebook.db'}"
    with Gradebook(db, "attention-and-transformers") as gb:
        grade = gb.find_grade("check_attention", "fx_attention", corpus.ASSIGNMENT, "partial")
        assert grade.auto_score == 4
        grade = gb.find_grade("check_multihead", "fx_attention", corpus.ASSIGNMENT, "partial")
        assert grade.auto_score == 0
        manual = gb.find_grade("explain_scaling", "fx_attention", corpus.ASSIGNMENT, "partial")
        assert manual.auto_score is None and manual.needs_manual_grade
    for args, code, output in graded["nbgrader"]:
        assert code == 0, f"nbgrader {' '.join(args)} failed:\n{output}"
    html = root / "grading" / "feedback" / "nan_gradients" / corpus.ASSIGNMENT / "fx_attention.html"
    assert "test_attention_gradients" in html.read_text()
    exported = (root / "grades.csv").read_text()
    assert "partial" in exported


def test_canary_never_reaches_a_student(graded):
    root = graded["root"]
    assert CANARY in graded["hidden"].read_text()  # planted, so this test is not vacuous
    student_facing = [graded["out"], root / "grading" / "autograded", root / "grading" / "feedback"]
    student_facing.append(root / "assignments")
    checked = 0
    for folder in student_facing:
        for path in folder.rglob("*"):
            if path.is_file():
                assert CANARY not in path.read_text(errors="replace"), path
                checked += 1
    assert checked > 50


# -- issue 13: intake and outputs ----------------------------------------------------------------


def _feedback(graded, row) -> str:
    return (graded["out"] / "feedback" / row["id"] / "feedback.md").read_text()


def test_hostile_notebooks_do_not_stop_the_batch(graded):
    rows = graded["rows"]
    assert graded["returncode"] == 0
    assert any("grade_id is not text" in n for n in rows["list_grade_id"]["notes"])
    assert "\ufffd" in rows["lone_surrogate"]["tests"][
        "test_fx_attention.py::test_attention_values"]["message"]  # fmt: skip
    assert "over the 256 KB limit" in rows["huge_code"]["reason"]
    assert "only folders" in rows["not_a_submission"]["reason"]
    assert rows["not_a_submission"]["submitted"] is False
    assert "symbolic link" in rows["symlinked_source"]["reason"]
    for name, row in rows.items():  # every row has its files, whatever happened
        assert row["fault"] != "grader", (name, row["reason"])
        assert (graded["out"] / "feedback" / row["id"] / "results.json").is_file(), name


def test_a_link_to_the_source_copies_no_solution(graded):
    autograded = graded["root"] / "grading" / "autograded"
    row = graded["rows"]["symlinked_source"]
    text = (autograded / row["id"] / corpus.ASSIGNMENT / corpus.NOTEBOOK).read_text()
    assert "masked_fill(~mask, 0.0)" not in text and "BEGIN SOLUTION" not in text


def test_student_ids_get_their_own_safe_folders(graded):
    rows = graded["rows"]
    ids = {rows[n]["id"] for n in ("kim lee", "kim_lee", "=1+2")}
    assert len(ids) == 3 and rows["kim_lee"]["id"] == "kim_lee"
    assert "4 / 8" in _feedback(graded, rows["kim lee"])
    assert "8 / 8" in _feedback(graded, rows["kim_lee"])
    with open(graded["out"] / "grades.csv", encoding="utf-8") as f:
        students = [r["student"] for r in csv.DictReader(f)]
    assert "'=1+2" in students and "=1+2" not in students


def test_messages_cannot_forge_or_run_in_what_people_see(graded):
    rows, root = graded["rows"], graded["root"]
    text = _feedback(graded, rows["fence_forgery"])
    assert "23 / 23" in text  # the message is shown ...
    assert not any(
        line.startswith(("#", "**")) and "23 / 23" in line for line in text.splitlines()
    )  # fmt: skip ... but cannot make a heading
    row = rows["html_injection"]
    pages = [_feedback(graded, row)]
    pages.append((graded["out"] / "feedback" / row["id"] / "results.json").read_text())
    pages.append((root / "grading" / "autograded" / row["id"] / corpus.ASSIGNMENT /
                  corpus.NOTEBOOK).read_text())  # fmt: skip
    html = root / "grading" / "feedback" / row["id"] / corpus.ASSIGNMENT / "fx_attention.html"
    page = html.read_text()
    assert "ag-xss" in page  # rendered, as text
    for payload in ("<script>alert('ag-", "<img src=x onerror", 'href="javascript:',
                    "onerror=alert('ag-width')"):  # fmt: skip
        assert payload.lower() not in page.lower(), payload  # shown as text, never live
    fence = None  # in feedback.md the payload may appear only inside a code block
    for line in pages[0].splitlines():
        mark = line.strip()
        if mark.startswith("```"):
            run = len(mark) - len(mark.lstrip("`"))
            if fence is None:
                fence = run
            elif run >= fence and not mark.strip("`"):
                fence = None
        elif fence is None:
            assert "<img" not in line and "<script" not in line, line


def test_only_the_solution_cells_are_graded_and_departures_reported(graded):
    rows = graded["rows"]
    extra = rows["stub_plus_extra_cell"]
    assert any("extra code cells not graded" in f for f in extra["flags"])
    assert any("not part of the assignment" in n for n in extra["notes"])
    assert any("duplicated grade_id" in f for f in rows["duplicated_cells"]["flags"])
    assert any("changed cell type: multihead" in f for f in rows["retyped_cell"]["flags"])
    with open(graded["out"] / "grades.csv", encoding="utf-8") as f:
        flags = {r["student"]: r["flags"] for r in csv.DictReader(f)}
    assert "extra code cells" in flags["stub_plus_extra_cell"] and not flags["reference"]


def test_check_close_refuses_complex_values(graded):
    tests = graded["rows"]["complex_nan"]["tests"]
    assert "complex" in tests["test_fx_attention.py::test_attention_values"]["message"]


# -- issue 28: the answer key does not reach the student ------------------------------------------


def test_feedback_states_no_expected_values(graded):
    """A student with immediate feedback cannot harvest the hidden tests' expected values: the
    messages say what is wrong and where (and name a known mistake), not the numbers."""
    import re

    row = graded["rows"]["cheat_allclose_toplevel"]  # zeros: wrong values, no known mistake
    folder = graded["out"] / "feedback" / row["id"]
    pages = [(folder / "feedback.md").read_text(), (folder / "results.json").read_text()]
    autograded = graded["root"] / "grading" / "autograded" / row["id"] / corpus.ASSIGNMENT
    pages.append((autograded / corpus.NOTEBOOK).read_text())
    for page in pages:
        assert "[not shown]" in page
        assert not re.search(r"expected -?\d", page), page[:2000]
        assert not re.search(r"largest difference -?\d", page)
    assert "divided by D" in _feedback(graded, graded["rows"]["wrong_scale"])  # still named


def test_load_notes_cannot_carry_a_dump(graded):
    row = graded["rows"]["dis_in_load_notes"]
    notes = [n for n in row["notes"] if "while loading" in n]
    assert notes and all(len(n) < 300 for n in notes)
    assert "LOAD_" not in _feedback(graded, row)


def test_graders_see_what_departs_from_the_release(graded):
    rows = graded["rows"]
    assert any("bidirectional or zero-width" in f and "U+202E" in f
               for f in rows["trojan_source"]["flags"])  # fmt: skip
    assert not any("bidirectional" in f for f in rows["reference"]["flags"])
    flags = rows["retyped_copy_first"]["flags"]  # the code cell counted; the copy is flagged
    assert any("duplicated grade_id" in f for f in flags)
    assert not any("changed cell type" in f for f in flags)
