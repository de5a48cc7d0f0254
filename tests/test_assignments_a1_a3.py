"""Assignments A1-A3: the committed releases, the hidden suites and the sample submissions agree.

- the committed release equals a fresh ``python -m autograder release`` of the source;
- a release holds no solution code and no hidden test (canary strings planted in the suites);
- ``python -m autograder check <name>``: reference 100 %, blank release 0, rerun identical;
- ``python -m autograder selfgrade``: every sample gets the score in its ``expected.json``;
- the source notebooks are the ones their generator writes (no hand edits that drift).

Grading starts sandboxed worker processes: these tests run in one xdist group, one after another.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ("a1_rnn_attention", "a2_self_attention", "a3_transformer")
CANARIES = {
    "a1_rnn_attention": "CANARY-HIDDEN-A1-7d3b2e91",
    "a2_self_attention": "CANARY-HIDDEN-A2-c41f08d6",
    "a3_transformer": "CANARY-HIDDEN-A3-95ae27f0",
}
GRADER = [sys.executable, "-m", "autograder", "--course-dir", str(ROOT)]
# One runner for a check (three submissions: a second runner costs more to start than it saves);
# two for the fifteen submissions of the self-grade.
CHECK_LIMITS = ["--jobs", "1", "--quiet"]
SELFGRADE_LIMITS = ["--jobs", "2", "--quiet"]

pytestmark = pytest.mark.xdist_group("assignments")


def run(args: list[str], cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def source_notebook(name: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)


def solution_lines(name: str) -> list[str]:
    """Distinctive lines from inside the source's BEGIN/END SOLUTION regions."""
    lines, inside = [], False
    for cell in source_notebook(name).cells:
        for line in cell.source.split("\n"):
            stripped = line.strip()
            if stripped == "### BEGIN SOLUTION":
                inside = True
            elif stripped == "### END SOLUTION":
                inside = False
            elif inside and len(stripped) >= 25 and not stripped.startswith("#"):
                lines.append(stripped)
    return lines


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_release_has_no_solution_and_no_hidden_test(name):
    release = ROOT / "assignments" / name
    files = sorted(p for p in release.rglob("*") if p.is_file())
    assert [p.name for p in files] == [f"{name}.ipynb"], f"unexpected files in {release}: {files}"
    text = files[0].read_text(encoding="utf-8")
    secrets = solution_lines(name)
    assert len(secrets) >= 10, "the source should have solution code to leak"  # not vacuous
    leaked = [line for line in secrets if line in text]
    assert not leaked, f"solution code in the release of {name}: {leaked[:3]}"
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    suite = ROOT / "autograder" / "tests" / name
    canary = CANARIES[name]
    assert any(canary in p.read_text() for p in suite.glob("test_*.py")), "canary not planted"
    assert canary not in text, f"the hidden suite's canary appears in the release of {name}"
    for path in suite.glob("test_*.py"):  # and no test function's name either
        for test in re.findall(r"^def (test_\w+)", path.read_text(), flags=re.M):
            assert test not in text, f"hidden test {test} is named in the release of {name}"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_release_cells_match_the_source(name):
    """Every graded cell of the source is in the release, with its points; stubs replace
    solutions, so the release raises NotImplementedError where the student must write code."""
    source = {c.metadata["nbgrader"]["grade_id"]: c for c in source_notebook(name).cells
              if "nbgrader" in c.metadata}  # fmt: skip
    release = nbformat.read(ROOT / "assignments" / name / f"{name}.ipynb", as_version=4)
    seen = {}
    for cell in release.cells:
        meta = cell.metadata.get("nbgrader", {})
        if "grade_id" in meta:
            seen[meta["grade_id"]] = cell
            assert meta.get("points") == source[meta["grade_id"]].metadata["nbgrader"].get("points")
        if meta.get("solution") and cell.cell_type == "code":
            assert "raise NotImplementedError()" in cell.source, meta["grade_id"]
    assert set(seen) == set(source)


@pytest.mark.slow
def test_release_equals_regenerated(tmp_path):
    """A fresh ``autograder release`` in a copy of the course gives the committed bytes."""
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    for name in ASSIGNMENTS:
        shutil.copytree(ROOT / "solutions" / name, tmp_path / "solutions" / name)
    out = run([sys.executable, "-m", "autograder", "--course-dir", str(tmp_path), "release",
               *ASSIGNMENTS], cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    for name in ASSIGNMENTS:
        fresh = (tmp_path / "assignments" / name / f"{name}.ipynb").read_bytes()
        committed = (ROOT / "assignments" / name / f"{name}.ipynb").read_bytes()
        assert fresh == committed, (
            f"assignments/{name} differs from a fresh release: run `make release` and commit"
        )


def test_sources_are_what_the_generator_writes():
    """solutions/*/ and the samples are generated by solutions/_authoring/build.py."""
    sys.path.insert(0, str(ROOT / "solutions" / "_authoring"))
    try:
        import importlib

        from nbtools import submission

        for name in ASSIGNMENTS:
            module = importlib.import_module(name)
            nb = module.build()
            committed = source_notebook(name)
            assert [c.source for c in committed.cells] != [], name
            # the generator's cells, after build.py's ruff format, have the same ids, kinds and
            # nbgrader metadata as the committed notebook
            assert [(c.id, c.cell_type, c.metadata.get("nbgrader")) for c in nb.cells] == [
                (c.id, c.cell_type, c.metadata.get("nbgrader")) for c in committed.cells
            ], f"solutions/{name} was edited by hand: rerun build.py {name}"
            assert submission(nb, {}).cells, name
            auto, manual = nb.totals()  # the "What is graded" table states the same points
            table = next(c.source for c in committed.cells if "## What is graded" in c.source)
            total = re.search(r"\*\*(\d+)\*\* \((\d+) automatic \+ (\d+) by hand\)", table)
            assert total and tuple(map(float, total.groups())) == (auto + manual, auto, manual)
            rows = re.findall(r"^\| (.+?) \| (hidden tests|by hand) \| (\d+) \|$", table, re.M)
            assert sum(float(p) for _, kind, p in rows if kind == "hidden tests") == auto, name
            assert sum(float(p) for _, kind, p in rows if kind == "by hand") == manual, name
            expected = json.loads(
                (ROOT / "autograder" / "samples" / name / "expected.json").read_text()
            )
            assert set(expected) == set(module.SAMPLES), name
    finally:
        sys.path.remove(str(ROOT / "solutions" / "_authoring"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_autograder_check(name):
    """Reference 100 %, blank release 0, a second run identical, suite consistent with the
    notebook's grade cells."""
    out = run([*GRADER, "check", name, *CHECK_LIMITS])
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert f"check {name}: passed" in out.stdout


@pytest.mark.slow
def test_samples_get_their_expected_scores(tmp_path):
    rows_path = tmp_path / "rows.json"
    out = run([*GRADER, "selfgrade", *ASSIGNMENTS, "--out", str(rows_path), *SELFGRADE_LIMITS])
    rows = json.loads(rows_path.read_text())
    table = "\n".join(
        f"{r['assignment']} {r['submission']}: {r['score']} / {r['max_score']} "
        f"(expected {r['expected']}) {r.get('details', '')}"
        for r in rows
    )
    assert out.returncode == 0, table + out.stderr[-2000:]
    names = {(r["assignment"], r["submission"]) for r in rows}
    for name in ASSIGNMENTS:  # reference, blank and the three samples of every assignment
        for sub in ("reference", "blank", "partial", "broken", "cheat"):
            assert (name, sub) in names, f"{name}/{sub} was not graded:\n{table}"
    by_key = {(r["assignment"], r["submission"]): r for r in rows}
    for name in ASSIGNMENTS:  # the samples span the range: none is all or nothing by accident
        scores = [by_key[(name, s)]["score"] for s in ("partial", "broken")]
        assert all(0 < s < by_key[(name, "reference")]["max_score"] for s in scores), table
