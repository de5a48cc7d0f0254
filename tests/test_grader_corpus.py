"""The cheat corpus: every submission in tests/fixtures/grader/corpus.py gets its expected score.

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
import subprocess
import sys
import threading
from pathlib import Path

import pytest

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


def _digest(folder: Path) -> dict[str, list]:
    return {
        str(p.relative_to(folder)): [hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime]
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _grade_corpus(folder: Path) -> dict:
    root = corpus.make_course(folder / "course", cache=folder.parent / "release")
    hidden = root / "autograder" / "tests" / corpus.ASSIGNMENT / "test_fx_attention.py"
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
        target = submitted / (entry.stem if entry.is_file() else entry.name) / corpus.ASSIGNMENT
        if entry.is_file():
            target.mkdir(parents=True)
            name = corpus.NOTEBOOK if entry.suffix == ".ipynb" else entry.name
            (target / name).write_bytes(entry.read_bytes())
        else:
            shutil.copytree(entry / corpus.ASSIGNMENT, target)
    before = _digest(submitted)
    out = root / "out"
    run = corpus.cli(
        "--course-dir", str(root), "grade", corpus.ASSIGNMENT, "--out", str(out),
        "--timeout", "2", "--load-timeout", "3", "--jobs", "2", "--quiet",
    )  # fmt: skip
    listener.close()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    nbgrader = []  # nbgrader's own tools on the grader's gradebook and autograded notebooks
    for args in (
        ["generate_feedback", corpus.ASSIGNMENT, "--student", "nan_gradients"],
        ["export"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "nbgrader", *args],
            cwd=root, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        nbgrader.append((args, done.returncode, done.stdout[-2000:] + done.stderr[-2000:]))
    return {
        "nbgrader": nbgrader,
        "root": str(root),
        "stdout": run.stdout,
        "expected": expected,
        "before": before,
        "connections": len(listener.connections),
        "hidden_before": hidden_before,
    }


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """The corpus graded once per test run (shared by xdist workers through files)."""
    info = corpus.once(corpus.shared_dir(tmp_path_factory, "corpus"), _grade_corpus)
    root = Path(info["root"])
    report = json.loads((root / "out" / "report.json").read_text())
    hidden = root / "autograder" / "tests" / corpus.ASSIGNMENT / "test_fx_attention.py"
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
    failures = {k: v["message"][:200] for k, v in row["tests"].items() if v["status"] != "passed"}
    assert row["score"] == pytest.approx(want["points"]), (
        f"{name} ({want['why']}): got {row['score']}, reason {row['reason']}, "
        f"failures {failures}, notes {row['notes']}"
    )
    assert row["max_score"] == corpus.MAX_POINTS
    if want.get("error"):
        assert row["status"] == "error" and row["reason"]


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
