"""The instructor's path on the fixture assignment: the Gradescope zip as Gradescope runs it, and
nbgrader's release -> submit -> collect -> grade -> formgrader -> feedback -> export."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "grader"))
import corpus  # noqa: E402

from autograder.gradescope import level_for, student_identity  # noqa: E402

A, NB = corpus.ASSIGNMENT, corpus.NOTEBOOK
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return corpus.make_course(
        tmp_path_factory.mktemp("course"), cache=corpus.shared_dir(tmp_path_factory, "release")
    )


def _env(**extra: str) -> dict:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, **extra}


def _reference(course: Path) -> nbformat.NotebookNode:
    release = nbformat.read(course / "assignments" / A / NB, as_version=4)
    return corpus._with_solutions(release, **corpus.reference_sources())


# ---------------------------------------------------------------------------------------------
# Gradescope
# ---------------------------------------------------------------------------------------------


def test_gradescope_identity_and_visibility_rules(tmp_path):
    assert student_identity(tmp_path) == "submission"
    meta = {"users": [{"email": "a@b.c", "id": 4711, "name": "A B"}]}
    (tmp_path / "submission_metadata.json").write_text(json.dumps(meta))
    assert student_identity(tmp_path) == "gs-4711"
    (tmp_path / "submission_metadata.json").write_text(json.dumps({"users": [{"email": "x@y"}]}))
    assert student_identity(tmp_path) == "gs-x@y"
    config = {"visibility": "after_due_date", "tests": {"*multihead*": "hidden"}}
    assert level_for("test_fx.py::test_attention_values", config) == "after_due_date"
    assert level_for("test_fx.py::test_multihead_matches", config) == "hidden"


def _gradescope_run(zip_path: Path, root: Path, notebook: bytes | None, user: int) -> dict:
    """Lay out ``root`` as Gradescope does and run ``run_autograder`` (no setup.sh: no network)."""
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")  # Gradescope unpacks the zip *into* /autograder/source
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    if notebook is not None:
        (root / "submission" / "my_attention.ipynb").write_bytes(notebook)
    meta = {"users": [{"id": user, "email": f"s{user}@uni.edu"}], "created_at": "2026-11-24"}
    (root / "submission_metadata.json").write_text(json.dumps(meta))
    out = subprocess.run(
        ["bash", str(root / "run_autograder")],
        env=_env(AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable),
        capture_output=True, text=True, timeout=600, cwd=root,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads((root / "results" / "results.json").read_text())


@pytest.mark.slow
def test_gradescope_zip_works_as_uploaded(course, tmp_path):
    archive = tmp_path / "gs.zip"
    corpus.cli(
        "--course-dir", str(course), "gradescope", A, "--out", str(archive),
        "--test-visibility", "*multihead*=after_due_date",
    )  # fmt: skip
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
    # the zip's top level is /autograder/source: no source/ folder of its own
    assert {"setup.sh", "run_autograder", "requirements.txt", "gradescope.json"} <= names
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111
    assert f"autograder/tests/{A}/test_fx_attention.py" in names
    assert f"assignments/{A}/{NB}" in names and "course_lib/__init__.py" in names
    assert not any(
        n.startswith(("source/", "solutions", "grading", "autograder/samples")) for n in names
    )
    with zipfile.ZipFile(archive) as zf:
        setup = zf.read("setup.sh").decode()
    assert '"$HERE/requirements.txt"' in setup and "python3.11" in setup

    reference = nbformat.writes(_reference(course)).encode()
    results = _gradescope_run(archive, tmp_path / "ref", reference, user=4711)
    assert results["score"] == 8 and len(results["tests"]) == 8  # 7 tests + written answers
    graded = [t for t in results["tests"] if t["max_score"]]
    assert all(t["status"] == "passed" for t in graded)
    levels = {t["name"]: t["visibility"] for t in graded}
    assert {v for k, v in levels.items() if "multihead" in k} == {"after_due_date"}
    assert {v for k, v in levels.items() if "multihead" not in k} == {"visible"}
    written = results["tests"][-1]
    assert written["output_format"] == "html" and "explain_scaling" in written["output"]
    assert "YOUR ANSWER HERE" in written["output"]  # the reference leaves the written answer
    assert "CANARY" not in json.dumps(results)

    blank = (course / "assignments" / A / NB).read_bytes()
    results = _gradescope_run(archive, tmp_path / "blank", blank, user=4712)
    assert results["score"] == 0 and all(t["score"] == 0 for t in results["tests"])

    results = _gradescope_run(archive, tmp_path / "broken", b'{"cells": [', user=4713)
    assert results["score"] == 0
    assert "JSON" in results["output"] or "notebook" in results["output"], results["output"]
    assert all(t["status"] == "failed" for t in results["tests"] if t["max_score"])
